"""The job side of the silent-hang probe (docs/hang.md): this folder is put first on PYTHONPATH by
the rendered script, so that its `sitecustomize` runs in every Python process of the job. The
job reads it from the package's own folder, so the compute nodes must see the installed package
(as they do the `autoexp` workloads)."""

import os

SITE_DIR = os.path.dirname(os.path.abspath(__file__))  # the folder the rendered script puts on PYTHONPATH
