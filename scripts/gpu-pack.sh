#!/usr/bin/env bash
# Prepares .dev/ for a GPU session (docs/cuda.md, "Running on a GPU"): everything scripts/gpu-check.sh
# needs on a machine with only the GPU driver: an xz-compressed copy of this Node binary, the built
# addon, and the packages the GPU suite and the transfer benchmark load (vitest, fast-check, tsx and
# their dependencies, ~10% of node_modules) as one tar.xz. Run here, then carry ['.dev'].
set -euo pipefail
cd "$(dirname "$0")/.."

# .dev/ must never be committed; info/exclude lives in the common git dir, shared by every worktree.
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
for pattern in /.dev/ /node_modules; do
  grep -qxF "$pattern" "$exclude" 2>/dev/null || echo "$pattern" >> "$exclude"
done
mkdir -p .dev
git check-ignore -q .dev/ || { echo "gpu-pack: .dev is not ignored by git" >&2; exit 1; }

node scripts/build-native.js
cp build/native/kvfabric.node .dev/kvfabric.node

# Node: compressed once per binary (30 MiB, a minute on 2 cores), reused while the binary is the same.
node_bin="$(command -v node)"
stamp="$(sha256sum "$node_bin" | cut -c1-16) $(node --version)"
if [ ! -f .dev/node.xz ] || [ "$(cat .dev/node.stamp 2>/dev/null)" != "$stamp" ]; then
  xz -T2 -c "$node_bin" > .dev/node.xz
  echo "$stamp" > .dev/node.stamp
fi

# The packages' dependency closure, resolved the way Node would from the repository root.
modules="$(node -e '
  const fs = require("fs"), path = require("path");
  const root = fs.realpathSync("node_modules"), seen = new Set();
  function visit(name, from) {
    for (let dir = from; ; dir = path.dirname(dir)) {
      const p = path.join(dir, "node_modules", name);
      if (fs.existsSync(path.join(p, "package.json"))) {
        const real = fs.realpathSync(p);
        if (seen.has(real)) return;
        seen.add(real);
        const pj = JSON.parse(fs.readFileSync(path.join(real, "package.json"), "utf8"));
        for (const d of Object.keys({ ...pj.dependencies, ...pj.optionalDependencies })) visit(d, real);
        return;
      }
      if (path.dirname(dir) === dir) return;
    }
  }
  for (const name of ["vitest", "fast-check", "tsx"]) visit(name, path.dirname(root));
  console.log([...seen].map((p) => path.relative(path.dirname(root), p)).join("\n"));
')"
modules_root="$(dirname "$(realpath node_modules)")"
# shellcheck disable=SC2086
tar -C "$modules_root" -cf - $modules | xz -T2 -6 > .dev/node_modules.tar.xz
du -ch .dev/* | sed 's/^/gpu-pack: /'
total=$(du -cb .dev | tail -1 | cut -f1)
[ "$total" -lt $((64 * 1024 * 1024)) ] || { echo "gpu-pack: .dev is $total bytes, over the 64 MiB a device run carries" >&2; exit 1; }
