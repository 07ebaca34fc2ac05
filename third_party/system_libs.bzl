"""System libraries from Debian, described through pkg-config.

`pkg_config_repository` runs `pkg-config --cflags --libs` at fetch time and writes a
cc_library carrying the flags; headers live in /usr/include and need no declaration.
"""

def _split(s):
    return [x for x in s.strip().split(" ") if x]

def _pkg_config_impl(ctx):
    pc = ctx.which("pkg-config")
    if pc == None:
        fail("pkg-config not found: run tools/bootstrap.sh")
    modules = ctx.attr.modules
    linkopts = []
    defines = []
    copts = []
    if modules:
        res = ctx.execute([pc, "--libs"] + modules)
        if res.return_code != 0:
            fail("pkg-config --libs %s failed: %s (run tools/bootstrap.sh)" % (" ".join(modules), res.stderr))
        linkopts = _split(res.stdout)
        res = ctx.execute([pc, "--cflags"] + modules)
        if res.return_code != 0:
            fail("pkg-config --cflags failed: " + res.stderr)
        for f in _split(res.stdout):
            if f.startswith("-D"):
                defines.append(f[2:])
            elif f.startswith("-I/usr/include"):
                pass
            else:
                copts.append(f)
    linkopts = linkopts + ctx.attr.extra_linkopts
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "lib",
    linkopts = %s,
    defines = %s,
    copts = %s,
)
""" % (repr(linkopts), repr(defines), repr(copts)))

pkg_config_repository = repository_rule(
    implementation = _pkg_config_impl,
    attrs = {
        "modules": attr.string_list(),
        "extra_linkopts": attr.string_list(),
    },
    local = True,
)
