"""Run ``asv`` in a checkout without ``.git`` (the offline GPU host), dates taken from a manifest.

The device host receives a copy of the working tree with no Git history, and
``asv run --python=same --set-commit-hash H`` asks the repository for the
commit's date. This wrapper gives asv a repository object that answers from a
manifest written here with ``git log`` (``tools/asv_gpu_prepare.sh``)::

    python tools/asv_nogit.py MANIFEST.json COMMIT run --python=same --set-commit-hash COMMIT ...

``MANIFEST.json`` maps full commit hashes to commit dates in milliseconds
(what asv's Git plugin returns). ``COMMIT`` is the hash that branch names
(``main``) resolve to for this run. Everything after it goes to asv unchanged.
Nothing else in asv is altered: results are written exactly as ``asv run``
writes them and publish on the CPU machine, where the real repository is.
"""

from __future__ import annotations

import json
import sys


def main():
    manifest_path, current, *asv_args = sys.argv[1:]
    with open(manifest_path) as f:
        dates = {h: int(ms) for h, ms in json.load(f).items()}

    import asv.commands.run as run_cmd
    import asv.repo as repo_mod

    def full(name):
        hits = [h for h in dates if name and h.startswith(name)]
        return hits[0] if len(hits) == 1 else None

    class ManifestRepo(repo_mod.NoRepository):
        """Commit hashes and dates from the manifest; branch names resolve to ``current``."""

        dvcs = "manifest"

        def get_hash_from_name(self, name):
            if name is None:
                return None
            return full(name) or full(current)

        def get_date(self, hash):
            if hash is None:
                return super().get_date(hash)
            return dates[full(hash)]

        def get_date_from_name(self, name):
            return self.get_date(self.get_hash_from_name(name))

        def get_name_from_hash(self, commit):
            return None

    if full(current) is None:
        sys.exit(f"asv_nogit: {current} is not in {manifest_path}")
    run_cmd.get_repo = lambda conf: ManifestRepo()

    from asv.main import main as asv_main

    sys.argv = ["asv", *asv_args]
    asv_main()


if __name__ == "__main__":
    main()
