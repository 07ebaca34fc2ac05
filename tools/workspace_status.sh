#!/bin/sh
# Bazel's workspace status command (.bazelrc: --workspace_status_command): the source
# revision that //common:build_info stamps into every binary (--version,
# weft_build_info{revision}) and deploy/image/build_image.py writes into the images'
# labels. "<commit>-dirty" when tracked files differ from it; "unknown" outside a git
# checkout (a source tarball), said so rather than guessed.
rev=$(git rev-parse HEAD 2>/dev/null) || rev=unknown
if [ "$rev" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
  rev="$rev-dirty"
fi
echo "STABLE_WEFT_REVISION $rev"
