#!/usr/bin/env bash
# Unsafe code at the edges only (issue 31, step 5). Raw `Unmanaged`, `unowned(unsafe)`,
# `_withUnsafeGuaranteedRef` and `@exclusivity(unchecked)` may appear in Sources/ only in:
#   - the loop and transport layers: Sources/*/EventLoop/, Sources/*/Transport/;
#   - Sources/*/Support/ (`Uncounted` is the one wrapper for an uncounted reference);
#   - the C targets: Sources/C*/;
#   - C-callback trampolines: files named *Trampolines.swift.
# Anywhere else (stages, upstream, cache, auth logic) they would make a reader learn
# lifetime rules that only matter for speed. Prints file:line of each use elsewhere and
# exits 1; exits 0 when there is none. Comments count too: a comment that needs one of
# these words belongs next to code that may use it.
# Usage: scripts/dev/check-unsafe.sh [ROOT]   (ROOT: a checkout; default this one)
set -euo pipefail
root=${1:-"$(cd "$(dirname "$0")/../.." && pwd)"}
cd "$root"
[ -d Sources ] || { echo "check-unsafe: no Sources/ under $root" >&2; exit 2; }

constructs='Unmanaged|unowned\(unsafe\)|_withUnsafeGuaranteedRef|@exclusivity\(unchecked\)'
allowed='^Sources/C[^/]*/|^Sources/[^/]+/(EventLoop|Transport|Support)/|Trampolines\.swift$'

found=0
while IFS= read -r hit; do
  file=${hit%%:*}
  [[ "$file" =~ $allowed ]] && continue
  echo "$hit"
  found=$((found + 1))
done < <(grep -rnE "$constructs" Sources | LC_ALL=C sort -t: -k1,1 -k2,2n)

if [ "$found" -gt 0 ]; then
  echo "check-unsafe: $found use(s) of Unmanaged, unowned(unsafe), _withUnsafeGuaranteedRef or @exclusivity(unchecked) outside EventLoop/, Transport/, Support/, the C targets and *Trampolines.swift (wrap the reference in Uncounted, hold it strongly, or move the C callback into a *Trampolines.swift file)" >&2
  exit 1
fi
echo "check-unsafe: no unsafe lifetime constructs outside the edges"
