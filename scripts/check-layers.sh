#!/usr/bin/env bash
# Fails when a folder includes a header of a layer above it. The layers point one way
# (docs/architecture.md): common <- model <- gpu, model <- structured, cache <- actors <- config <- net <- app,
# with bench/ and examples/ beside app/ at the top and tests/ allowed everything.
# Run by ctest (layers.check) and usable by hand: bash scripts/check-layers.sh [ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"

# folder -> the top-level folders its sources may include (besides system and library headers)
declare -A allowed=(
  [common]="common"
  [model]="common model"
  [gpu]="common model gpu"
  [structured]="common model structured"
  [cache]="common model cache"
  [actors]="common model structured cache actors"
  [config]="common model structured cache actors config"
  [net]="common model structured cache actors config net"
  [app]="common model gpu structured cache actors config net app bench"
  [bench]="common model gpu structured cache actors config net app bench"
  [examples]="common model structured cache actors config examples"
)

bad=0
checked=0
for layer in "${!allowed[@]}"; do
  [ -d "$layer" ] || continue
  while IFS= read -r -d '' file; do
    checked=$((checked + 1))
    while IFS=: read -r line target; do
      top="${target%%/*}"
      [ "$top" = "$target" ] && continue          # "foo.hpp": a file beside it or a library's
      [ -d "$top" ] || continue                   # a library's own folder ("caf/...")
      case " ${allowed[$layer]} " in
        *" $top "*) ;;
        *) echo "layer violation: $file:$line includes \"$target\" ($layer/ may include: ${allowed[$layer]})"
           bad=$((bad + 1)) ;;
      esac
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" \
               | sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
  done < <(find "$layer" -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) -print0)
done

if [ "$bad" -gt 0 ]; then
  echo "check-layers: $bad include(s) point up a layer (see docs/architecture.md)"
  exit 1
fi
echo "check-layers: $checked files, every include points down or sideways"
