"""scripts/seed_venv.py: what the install links from .venv into .venv-paddlenlp."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "seed_venv.py"


def _fake_dist(site: Path, name: str, version: str, files: dict[str, str]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (site / "../../../bin").resolve().mkdir(parents=True, exist_ok=True)
    (site / "../../../bin/tool").resolve().write_text("#!/src/python\n")  # a console script
    record = [f"{rel},," for rel in files] + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,",
                                              "../../../bin/tool,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def test_links_same_version_dists_only(tmp_path):
    source, target = tmp_path / "src" / "lib" / "site-packages", tmp_path / "dst"
    target.mkdir(parents=True)
    _fake_dist(source, "Same_Pkg", "1.0", {"same_pkg/__init__.py": "x = 1\n",
                                           "same_pkg/data/blob.bin": "b" * 100})
    _fake_dist(source, "other", "2.0", {"other/__init__.py": "y = 2\n"})
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"install": [
        {"metadata": {"name": "same-pkg", "version": "1.0"}},   # other spelling, same dist
        {"metadata": {"name": "other", "version": "3.0"}},      # another version: pip installs it
        {"metadata": {"name": "absent", "version": "1.0"}}]}))  # not in the source
    out = subprocess.run([sys.executable, str(SCRIPT), str(report), str(source), str(target)],
                         check=True, capture_output=True, text=True).stdout
    assert "linked 1 distributions" in out and "same-pkg==1.0" in out
    for rel in ("same_pkg/__init__.py", "same_pkg/data/blob.bin", "Same_Pkg-1.0.dist-info/RECORD"):
        assert os.path.samefile(source / rel, target / rel)  # a hard link, not a copy
    # nothing else: not the other version, not the console script outside site-packages
    linked = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert linked == ["Same_Pkg-1.0.dist-info/METADATA", "Same_Pkg-1.0.dist-info/RECORD",
                      "same_pkg/__init__.py", "same_pkg/data/blob.bin"]


def test_bad_arguments_name_the_argument(tmp_path):
    report = tmp_path / "r.json"
    report.write_text("{}")
    result = subprocess.run([sys.executable, str(SCRIPT), str(report), str(tmp_path / "no"),
                             str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2 and "SOURCE_SITE_PACKAGES" in result.stderr
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 2 and "Usage" in result.stderr
