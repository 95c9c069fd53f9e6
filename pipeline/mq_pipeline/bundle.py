"""`make pipeline-zip`: the job as EMR Serverless wants it, an entry point and a zip.

    build/pipeline/main.py            -> the job's entryPoint
    build/pipeline/mq_pipeline.zip    -> --py-files (sparkSubmitParameters)

Only the modules the job imports go into the zip (no renderer, generator, benchmark or
DuckDB reference), with fixed timestamps and order so the same sources give the same bytes.
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

JOB_MODULES = (
    "__init__.py", "consts.py", "schema.py", "transforms.py", "report.py", "arrow_write.py",
    "job.py",
)


def build(dest: Path) -> Path:
    pkg = Path(__file__).resolve().parent
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / "mq_pipeline.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in JOB_MODULES:
            info = zipfile.ZipInfo(f"mq_pipeline/{name}", date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, (pkg / name).read_bytes())
    shutil.copyfile(pkg.parent / "main.py", dest / "main.py")
    return target


if __name__ == "__main__":
    out = build(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("build/pipeline"))
    print(out)
