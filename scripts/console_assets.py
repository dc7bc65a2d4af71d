"""Vendor the console's front-end libraries into src/tierlog/console/static/vendor/.

The console serves every asset itself (no request to an outside host), so its libraries are copied as the
built ES modules their npm packages ship: preact (the renderer), preact/hooks (state), htm (JSX-like
templates in plain tagged strings, so there is no build step), uplot (the metrics charts: canvas time
series, no dependencies) with its stylesheet. ``npm pack`` fetches each pinned tarball
into a temporary folder; the files are copied with their licence, and ``VERSIONS.json`` records each
package's version and the tarball's integrity hash. Run it to move to new versions (change PACKAGES):

    python scripts/console_assets.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[1] / "src" / "tierlog" / "console" / "static" / "vendor"

#: npm package@version -> {file in its tarball: name served under /static/vendor/}
PACKAGES = {
    "preact@10.29.8": {"package/dist/preact.module.js": "preact.mjs",
                       "package/hooks/dist/hooks.module.js": "hooks.mjs",
                       "package/LICENSE": "preact.LICENSE"},
    "htm@3.1.1": {"package/dist/htm.module.js": "htm.mjs", "package/LICENSE": "htm.LICENSE"},
    "uplot@1.6.32": {"package/dist/uPlot.esm.js": "uplot.mjs", "package/dist/uPlot.min.css": "uplot.css",
                     "package/LICENSE": "uplot.LICENSE"},
}


def main() -> None:
    VENDOR.mkdir(parents=True, exist_ok=True)
    versions = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spec, files in PACKAGES.items():
            out = subprocess.run(["npm", "pack", spec, "--json"], cwd=tmp, check=True, capture_output=True,
                                 text=True)
            info = json.loads(out.stdout)[0]
            with tarfile.open(Path(tmp) / info["filename"]) as tar:
                for member, name in files.items():
                    source = tar.extractfile(member)
                    assert source is not None, f"{spec} has no {member}"
                    with open(VENDOR / name, "wb") as target:
                        shutil.copyfileobj(source, target)
            versions[info["name"]] = {"version": info["version"], "integrity": info["integrity"],
                                      "files": sorted(files.values())}
    (VENDOR / "VERSIONS.json").write_text(json.dumps(versions, indent=1) + "\n", encoding="utf-8")
    listed = ", ".join(f"{name} {v['version']}" for name, v in versions.items())
    print(f"vendored {listed} into {VENDOR}")


if __name__ == "__main__":
    main()
