"""The strings of the tokenizer corpus (tests/testdata/tokenizer_corpus.jsonl).

Each entry is (category, value) where value is a str, or bytes for input that is not
valid UTF-8. make_tokenizer_ref.py tokenizes every entry with llama.cpp. Keep entries
deterministic: the generated part below uses a fixed seed.
"""

import random

# Chat-shaped strings with special tokens written in the text.
_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

FIXED = [
    # --- empty and tiny ---
    ("empty", ""),
    ("tiny", " "),
    ("tiny", "\n"),
    ("tiny", "a"),
    ("tiny", "A"),
    ("tiny", "0"),
    ("tiny", "."),
    ("tiny", "'"),
    ("tiny", "\t"),
    ("tiny", "\r"),
    # --- ASCII prose ---
    ("ascii", "Hello world"),
    ("ascii", "Hello, world!"),
    ("ascii", "The quick brown fox jumps over the lazy dog."),
    ("ascii", "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG"),
    ("ascii", "It was the best of times, it was the worst of times, it was the age of wisdom."),
    ("ascii", "Call me Ishmael. Some years ago - never mind how long precisely - having little money."),
    ("ascii", "camelCaseIdentifier and snake_case_identifier and kebab-case-identifier"),
    ("ascii", "e.g. i.e. etc. Mr. Mrs. Dr. St. U.S.A. a.m. p.m."),
    ("ascii", "What?! No way... Really?? Yes!!!"),
    ("ascii", "email: someone@example.com, url: https://example.org/path?q=1&r=two#frag"),
    ("ascii", "ALLCAPS lowercase MiXeDcAsE"),
    ("ascii", "a b c d e f g h i j k l m n o p q r s t u v w x y z"),
    ("ascii", "~!@#$%^&*()_+`-={}|[]\\:\";'<>?,./"),
    ("ascii", "SmolLM2 is a family of compact language models."),
    ("ascii", "antidisestablishmentarianism supercalifragilisticexpialidocious"),
    ("ascii", "rock'n'roll o'clock y'all ma'am"),
    # --- contractions ---
    ("contractions", "it's"),
    ("contractions", "don't won't can't shouldn't"),
    ("contractions", "we're they've I'm you'll she'd"),
    ("contractions", "IT'S DON'T WE'RE THEY'VE I'M YOU'LL SHE'D"),
    ("contractions", "John's car isn't Mary's"),
    ("contractions", "JOHN'S car ISN'T MARY'S"),
    ("contractions", "'s 't 're 've 'm 'll 'd"),
    ("contractions", "'S 'T 'RE 'VE 'M 'LL 'D"),
    ("contractions", "'Re 'rE 'lL 'Ll"),
    ("contractions", "it\u2019s don\u2019t we\u2019re"),
    ("contractions", "''s '''t '"),
    ("contractions", "the dogs' bowls"),
    ("contractions", "'sup 'tis 'twas"),
    ("contractions", "x'y 'r 'e 'v"),
    ("contractions", "I'd've y'all'd've"),
    # --- accents / Latin ---
    ("accents", "caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade"),
    ("accents", "Stra\u00dfe \u00fcber \u00c4pfel \u00d6l"),
    ("accents", "ma\u00f1ana \u00bfQu\u00e9 tal? \u00a1Ol\u00e1!"),
    ("accents", "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u"),
    ("accents", "e\u0301 (e + combining acute) vs \u00e9"),
    ("accents", "Zo\u00eb Bront\u00eb No\u00ebl"),
    ("accents", "\u0141\u00f3d\u017a \u017b\u00f3\u0142w \u0161\u010d\u0159\u017e\u00fd"),
    ("accents", "\u00c5ngstr\u00f6m \u00f8 \u00e6 \u00fe \u00f0"),
    ("accents", "a\u0300\u0301\u0302\u0303\u0304 stacked marks"),
    ("accents", "\u0130stanbul \u0131\u015f\u0131k \u011f"),
    # --- CJK ---
    ("cjk", "\u4f60\u597d\uff0c\u4e16\u754c\uff01"),
    ("cjk", "\u6211\u7231\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002"),
    ("cjk", "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c"),
    ("cjk", "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57"),
    ("cjk", "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4"),
    ("cjk", "\u6771\u4eac\u30bf\u30ef\u30fc\u306f333\u30e1\u30fc\u30c8\u30eb\u3067\u3059\u3002"),
    ("cjk", "\uff21\uff22\uff23\uff11\uff12\uff13 full-width"),
    ("cjk", "\u300c\u5f15\u7528\u300d\u3010\u62ec\u5f27\u3011\u3001\u3002"),
    ("cjk", "\u4e2d\u6587 English \u6df7\u5408 text"),
    ("cjk", "\U00020000\U0002a6d6 ext-B ideographs"),
    # --- emoji ---
    ("emoji", "\U0001f600"),
    ("emoji", "I love \U0001f355 and \U0001f37a!"),
    ("emoji", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family"),
    ("emoji", "\U0001f44d\U0001f3fb\U0001f44d\U0001f3fc\U0001f44d\U0001f3fd\U0001f44d\U0001f3fe\U0001f44d\U0001f3ff"),
    ("emoji", "\U0001f937\U0001f3fd\u200d\u2640\ufe0f shrug"),
    ("emoji", "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5\U0001f1eb\U0001f1f7 flags"),
    ("emoji", "1\ufe0f\u20e3 #\ufe0f\u20e3 keycaps"),
    ("emoji", "\u2764\ufe0f \u2764 \u263a\ufe0f"),
    ("emoji", "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f3f4\u200d\u2620\ufe0f"),
    ("emoji", "\U0001f9d1\u200d\U0001f4bb\U0001f469\U0001f3ff\u200d\U0001f52c"),
    ("emoji", "text\U0001f600text \U0001f600 \U0001f600\U0001f600\U0001f600"),
    ("emoji", "\u2600\u2601\u2602\u2603 \u2708 \u231a"),
    # --- other scripts ---
    ("scripts", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645"),
    ("scripts", "\u0627\u0644\u0644\u064f\u0651\u063a\u064e\u0629\u064f \u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629"),
    ("scripts", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd"),
    ("scripts", "\u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea \u05e2\u05dd \u05e0\u05d9\u05e7\u05d5\u05d3"),
    ("scripts", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
    ("scripts", "\u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902 \u0967\u0968\u0969 \u0905\u0902\u0915"),
    ("scripts", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01"),
    ("scripts", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07"),
    ("scripts", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?"),
    ("scripts", "\u0421\u042a\u0401\u0416 \u0451\u0436 \u0491 \u0457 \u0454"),
    ("scripts", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5"),
    ("scripts", "\u03b1\u03b2\u03b3\u03b4\u03b5 \u0391\u0392\u0393\u0394\u0395 \u03c0 \u03a3 \u03c2"),
    ("scripts", "\u0532\u0561\u0580\u0565\u0582 \u0561\u0577\u056d\u0561\u0580\u0570"),
    ("scripts", "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0"),
    ("scripts", "\u09a8\u09ae\u09b8\u09cd\u0995\u09be\u09b0 \u09ac\u09bf\u09b6\u09cd\u09ac"),
    ("scripts", "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0b89\u0bb2\u0b95\u0bae\u0bcd"),
    ("scripts", "\u1230\u120b\u121d \u12d3\u1208\u121d"),
    ("scripts", "\u1000\u1019\u1039\u1018\u102c\u1037 \u1019\u103c\u1014\u103a\u1019\u102c"),
    ("scripts", "\u0f56\u0f7c\u0f51\u0f0b\u0f61\u0f72\u0f42"),
    ("scripts", "\u1780\u1798\u17d2\u1796\u17bb\u1787\u17b6"),
    # --- mixed scripts ---
    ("mixed", "Hello \u043c\u0438\u0440 \u4e16\u754c \u0639\u0627\u0644\u0645 \u05e2\u05d5\u05dc\u05dd \U0001f30d"),
    ("mixed", "abc\u0430\u0431\u0432\u03b1\u03b2\u03b3"),
    ("mixed", "\u0645\u0631\u062d\u0628\u0627123abc"),
    ("mixed", "English\u0939\u093f\u0928\u094d\u0926\u0940\u0e44\u0e17\u0e22\u4e2d\u6587"),
    ("mixed", "The word \u00ab\u043f\u0440\u0438\u0432\u0435\u0442\u00bb means hello."),
    ("mixed", "price: \u20ac12,50 / \u00a35 / \u00a5100 / \u20b9250 / $3.99"),
    ("mixed", "\u05e9\u05dc\u05d5\u05dd hello \u05e2\u05d5\u05dc\u05dd world"),
    # --- whitespace ---
    ("whitespace", "  leading spaces"),
    ("whitespace", "trailing spaces   "),
    ("whitespace", "two  spaces   three    four"),
    ("whitespace", "tab\tseparated\tvalues"),
    ("whitespace", "\t\tindented with tabs"),
    ("whitespace", "line one\nline two\n"),
    ("whitespace", "para one\n\npara two\n\n\npara three"),
    ("whitespace", "windows\r\nline\r\nendings\r\n"),
    ("whitespace", "\r\n\r\n"),
    ("whitespace", "mixed \t \n \r\n whitespace"),
    ("whitespace", "    "),
    ("whitespace", "\n\n\n\n"),
    ("whitespace", " \n \n "),
    ("whitespace", "a   1"),
    ("whitespace", "a \t1"),
    ("whitespace", "x  \U0001f600"),
    ("whitespace", "non\u00a0breaking\u00a0space"),
    ("whitespace", "ideographic\u3000space"),
    ("whitespace", "en\u2002em\u2003thin\u2009hair\u200aspaces"),
    ("whitespace", "vertical\x0btab and form\x0cfeed"),
    ("whitespace", "next\u0085line and line\u2028separator\u2029para"),
    ("whitespace", "zero\u200bwidth\u200cnon\u200djoiner"),
    ("whitespace", "  \u00a0 mixed unicode spaces \u3000 "),
    ("whitespace", "end with newline\n"),
    ("whitespace", "\nstart with newline"),
    ("whitespace", "space before punctuation ! ? ."),
    # --- digits ---
    ("digits", "1234567890"),
    ("digits", "3.14159265358979323846"),
    ("digits", "1,000,000 and 1.000.000 and 1 000 000"),
    ("digits", "year 2024, room 101, pi 3.14"),
    ("digits", "+1 (555) 123-4567"),
    ("digits", "0x1F 0b1010 0o777 1e-10 6.02e23"),
    ("digits", "v1.2.3-rc4"),
    ("digits", "12345678901234567890123456789012345678901234567890"),
    ("digits", "abc123def456"),
    ("digits", " 42 "),
    ("digits", "\u0661\u0662\u0663 \u0967\u0968\u0969 \u0e51\u0e52\u0e53"),
    ("digits", "x\u00b2 + y\u00b3 = z\u00b9"),
    ("digits", "\u00bd \u00bc \u2153 \u215e"),
    ("digits", "\u2160 \u2161 \u216b \u2170"),
    ("digits", "\u2460\u2461\u2462 \u2776"),
    ("digits", "\uff11\uff12\uff13\uff14"),
    ("digits", "2023-10-05T14:48:00Z"),
    ("digits", "$1,234.56 (-7.8%)"),
    # --- code ---
    ("code", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"),
    ("code", "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)"),
    ("code", "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n"),
    ("code", "#include <iostream>\n\nint main() {\n  std::cout << \"Hello\" << std::endl;\n  return 0;\n}\n"),
    ("code", "template <typename T>\nstd::vector<T> f(const std::vector<T>& v) { return {v.rbegin(), v.rend()}; }"),
    ("code", "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }"),
    ("code", "{\"name\": \"weft\", \"version\": 1, \"tags\": [\"llm\", \"serving\"], \"ok\": true, \"x\": null}"),
    ("code", "{\n  \"nested\": {\n    \"array\": [1, 2, 3],\n    \"float\": -0.5e-3\n  }\n}"),
    ("code", "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>"),
    ("code", "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;"),
    ("code", "$ ls -la | grep '.txt' > out.log 2>&1 && echo \"done\""),
    ("code", "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$"),
    ("code", "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n}"),
    ("code", "if x != nil {\n\treturn fmt.Errorf(\"bad: %w\", err)\n}"),
    ("code", "# Title\n\n* item one\n* item **two**\n\n```python\nprint('hi')\n```\n"),
    ("code", "a+=1;b-=2;c*=3;d/=4;e%=5;f<<=6;g>>=7;h&=8;i|=9;j^=10;"),
    ("code", "    // indented comment\n\t/* tab comment */\n"),
    ("code", "x=>x**2; y ?? z; a?.b; c!!; d::e; f->g; h...i"),
    ("code", "\\begin{equation} E = mc^2 \\end{equation}"),
    # --- punctuation ---
    ("punct", "\u201cquoted\u201d \u2018single\u2019 \u00abguillemets\u00bb \u201elow\u201c"),
    ("punct", "em\u2014dash en\u2013dash hyphen-minus \u2212 minus"),
    ("punct", "ellipsis\u2026 and ... and \u2026\u2026"),
    ("punct", "!!!???...,,,;;;:::"),
    ("punct", "(parens) [brackets] {braces} <angles>"),
    ("punct", "\u00a7 \u00b6 \u2020 \u2021 \u2022 \u00b7 \u2030 \u2032 \u2033"),
    ("punct", "\u00a9 \u00ae \u2122 \u00b0C \u00b1 \u00d7 \u00f7 \u221e \u2248 \u2260 \u2264 \u2265"),
    ("punct", "\u2190 \u2192 \u2191 \u2193 \u21d2 \u2200 \u2203 \u2208 \u2211 \u222b"),
    ("punct", "--- *** ___ === ~~~ ###"),
    ("punct", "a.b,c;d:e!f?g"),
    ("punct", "\u00bfquestion? \u00a1exclaim!"),
    # --- control and invisible characters ---
    ("control", "nul\x00byte"),
    ("control", "bell\x07 and escape\x1b[31m red\x1b[0m"),
    ("control", "del\x7f char"),
    ("control", "\ufeffBOM at start"),
    ("control", "rtl\u200fmark ltr\u200emark"),
    ("control", "soft\u00adhyphen"),
    ("control", "word\u2060joiner"),
    ("control", "\ue000\uf8ff private use"),
    ("control", "\U000f0000\U0010fffd plane 15/16"),
    ("control", "\ufffe\uffff noncharacters"),
    ("control", "\U0010fffe\U0010ffff last"),
    ("control", "\u0378\u0379 unassigned"),
    ("control", "\ufffd replacement char"),
    ("control", "\U0001d400\U0001d401 math bold"),
    # Bytes whose GPT-2 character is missing from SmolLM2's vocabulary: llama.cpp drops
    # them (0x04 0x06 0x13 0x14 0x16 0x1D; 0xF1 leads U+40000..U+7FFFF).
    ("control", "a\x04b\x06c\x13d\x14e\x16f\x1dg"),
    ("control", "plane 4: \U00040000 plane 9: \U00090001 end"),
    ("control", "\U00013000 hieroglyph \U00010330 gothic"),
    # --- long ---
    ("long", "a" * 500),
    ("long", "ab" * 300),
    ("long", "Donaudampfschifffahrtselektrizit\u00e4tenhauptbetriebswerkbauunterbeamtengesellschaft"),
    ("long", "Pneumonoultramicroscopicsilicovolcanoconiosis"),
    ("long", "https://example.com/" + "very/long/path/" * 20 + "index.html?" + "&".join("k%d=v%d" % (i, i) for i in range(20))),
    ("long", "TWFueSBoYW5kcyBtYWtlIGxpZ2h0IHdvcmsuIE1hbnkgaGFuZHMgbWFrZSBsaWdodCB3b3JrLg==" * 4),
    ("long", "\u4e00" * 200),
    ("long", "\U0001f600" * 100),
    ("long", " " * 300 + "x"),
    ("long", "9" * 300),
    ("long", "word " * 200),
    ("long", "\n" * 100),
    ("long", "-" * 200),
    # --- special tokens written in the text ---
    ("special", "<|im_start|>"),
    ("special", "<|im_end|>"),
    ("special", "<|endoftext|>"),
    ("special", "<|im_start|>user\nHello!<|im_end|>\n"),
    ("special", "<|im_start|>system\n" + _SYSTEM + "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"),
    ("special", "<|im_start|>assistant\nThe answer is 4.<|im_end|>"),
    ("special", "text<|endoftext|>more text"),
    ("special", "<|im_start|><|im_end|><|endoftext|>"),
    ("special", "<|im_start|><|im_start|>"),
    ("special", " <|im_start|> spaced <|im_end|> "),
    ("special", "\n<|im_start|>\n"),
    ("special", "<repo_name>weft<file_sep>a.py<filename>b.py<gh_stars>10"),
    ("special", "<issue_start><issue_comment><issue_closed>"),
    ("special", "<jupyter_start><jupyter_text><jupyter_code><jupyter_output><jupyter_script><empty_output>"),
    ("special", "<reponame>x</reponame>"),
    ("special", "<|im_start"),
    ("special", "<|im_start|"),
    ("special", "im_start|>"),
    ("special", "<|im_end"),
    ("special", "<|IM_START|>"),
    ("special", "< |im_start| >"),
    ("special", "<|im_<|im_end|>start|>"),
    ("special", "<<|im_start|>>"),
    ("special", "<|im_start|>\u4f60\u597d<|im_end|>"),
    ("special", "<|im_start|>user\n\U0001f600<|im_end|>"),
    ("special", "<|endoftext|><|endoftext|>"),
    ("special", "<s></s><unk>[INST]<<SYS>>"),
    ("special", "<|user|><|assistant|><|system|>"),
    ("special", "<|im_start|>user\nSay \"<|im_end|>\" literally<|im_end|>"),
    ("special", "a<|im_start|>b<|im_end|>c<|endoftext|>d"),
]


# Invalid UTF-8 (bytes). llama.cpp turns each byte it cannot decode into U+FFFD and
# re-encodes overlong forms. Sequences decoding above U+10FFFF are NOT included: they
# make llama.cpp abort (std::invalid_argument escapes llama_tokenize).
INVALID = [
    ("invalid", b"\xff"),
    ("invalid", b"\xfe\xff"),
    ("invalid", b"\x80"),
    ("invalid", b"abc\x80def"),
    ("invalid", b"\xc3"),
    ("invalid", b"caf\xc3"),
    ("invalid", b"\xe4\xbd"),
    ("invalid", b"\xe4\xbd hello"),
    ("invalid", b"\xf0\x9f\x98"),
    ("invalid", b"\xf0\x9f\x98 x"),
    ("invalid", b"\xc0\x80"),
    ("invalid", b"\xc1\xbf"),
    ("invalid", b"\xe0\x80\x80"),
    ("invalid", b"\xed\xa0\x80\xed\xb0\x80"),
    ("invalid", b"\xf8\x88\x80\x80\x80"),
    ("invalid", b"a\xffb\xfec"),
    ("invalid", b"\xc3\x28"),
    ("invalid", b"\xa0\xa1"),
    ("invalid", b"<|im_start|>\xff<|im_end|>"),
    ("invalid", b"\xe2<|im_end|>\x82\xac"),
    ("invalid", b"ok \xe2\x82\xac ok \xe2\x82 bad"),
    ("invalid", b"\x00\xff\x00"),
]


def _generated(n=48, seed=20240601):
    """Deterministic mixtures of the pieces above (boundary interactions)."""
    rng = random.Random(seed)
    pieces = [
        "the", " the", "The", "'s", "'S", "'ll", " ", "  ", "\n", "\r\n", "\t", "1", "23",
        " 456", "7.5", "caf\u00e9", "\u00fcber", "\u4f60\u597d", "\u3053\u3093", "\uc548\ub155",
        "\U0001f600", "\U0001f44d\U0001f3fd", "\u200d", "\u043c\u0438\u0440",
        "\u0645\u0631\u062d\u0628\u0627", "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947",
        "\u0e44\u0e17\u0e22", "\u03b1\u03b2", "()", "{}", "[", "]", "...", "!", "?", ",", ";",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im", "|>", "<", ">", "==", "->",
        "def", " return", "    ", "\u00a0", "\u3000", "x", "Y", "z_", "__init__", "0x", "ff",
        "\u0301", "\u00b2", "\u00bd", "\u2014", "\u201c", "\u201d", "$", "%", "#", "@",
    ]
    out = []
    for _ in range(n):
        k = rng.randint(2, 14)
        out.append(("generated", "".join(rng.choice(pieces) for _ in range(k))))
    return out


def corpus():
    return FIXED + INVALID + _generated()


def random_corpus(n, seed):
    """Random strings for differential testing against llama.cpp (not committed).

    Mixes ASCII, pieces of the fixed corpus, random code points from every plane
    (assigned or not), whitespace runs, special-token texts and raw bytes. Raw bytes
    avoid F4-F7 leads: llama.cpp aborts on sequences that decode above U+10FFFF.
    """
    rng = random.Random(seed)
    fixed = [v for _, v in FIXED if isinstance(v, str) and v]
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<reponame>", "<|im", "|>"]

    def code_point():
        r = rng.random()
        if r < 0.4:
            return chr(rng.randint(0x20, 0x7E))
        if r < 0.55:
            return chr(rng.randint(0x80, 0x24F))
        if r < 0.85:
            while True:
                cp = rng.randint(0x250, 0xFFFF)
                if not 0xD800 <= cp < 0xE000:
                    return chr(cp)
        return chr(rng.randint(0x10000, 0x10FFFF))

    def piece():
        r = rng.random()
        if r < 0.35:
            return "".join(code_point() for _ in range(rng.randint(1, 6)))
        if r < 0.55:
            f = rng.choice(fixed)
            a = rng.randint(0, len(f))
            return f[a:a + rng.randint(1, 24)]
        if r < 0.7:
            return "".join(rng.choice(" \t\n\r\u00a0\u3000\x0b") for _ in range(rng.randint(1, 5)))
        if r < 0.8:
            return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 8)))
        if r < 0.9:
            return rng.choice(specials)
        return "'" + rng.choice(["s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "x"])

    out = []
    while len(out) < n:
        s = "".join(piece() for _ in range(rng.randint(1, 10)))
        if rng.random() < 0.1:
            raw = bytearray(s.encode("utf-8"))
            for _ in range(rng.randint(1, 3)):
                b = rng.choice([rng.randint(0x80, 0xF3), rng.randint(0xF8, 0xFF)])
                raw.insert(rng.randint(0, len(raw)), b)
            if not _aborts_llama_cpp(bytes(raw)):
                out.append(("random", bytes(raw)))
        else:
            out.append(("random", s))
    return out


def _aborts_llama_cpp(data):
    """True if llama.cpp's lenient decoder would produce a code point above U+10FFFF
    (a F4-F7 lead with three continuation bytes): llama_tokenize aborts on those."""
    i = 0
    while i < len(data):
        c = data[i]
        if c >= 0xF0 and c < 0xF8 and i + 3 < len(data) and all(
                0x80 <= data[i + k] < 0xC0 for k in (1, 2, 3)):
            cp = ((c & 7) << 18) | ((data[i + 1] & 0x3F) << 12) | ((data[i + 2] & 0x3F) << 6) | (
                data[i + 3] & 0x3F)
            if cp > 0x10FFFF:
                return True
            i += 4
        elif 0xE0 <= c < 0xF0 and i + 2 < len(data) and all(
                0x80 <= data[i + k] < 0xC0 for k in (1, 2)):
            i += 3
        elif 0xC0 <= c < 0xE0 and i + 1 < len(data) and 0x80 <= data[i + 1] < 0xC0:
            i += 2
        else:
            i += 1
    return False
