"""The push to the Hugging Face Hub: every problem the user can fix is found before any upload work.

`check_push` runs first (repo id, branch name, token), then `push` makes one commit of the
folder's files, on `main` or on a branch (`--revision`: intermediate checkpoints live on branches
of the same repository, as the Hub's own convention for training checkpoints). The token is
never passed around, printed or written: huggingface_hub reads it from the environment or its
login file itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from langadapt.errors import LangadaptError

BRANCH = re.compile(r"^(?!.*\.\.)(?!.*//)[A-Za-z0-9][A-Za-z0-9._/-]*(?<![./])$")
"""A git branch name the Hub accepts: no spaces, no '..', no leading '-' or trailing '/' or '.'."""


def check_push(repo_id: str | None, revision: str | None = None) -> str:
    """Refuse a push that cannot work, with one line naming what to fix; returns the repo id."""
    from huggingface_hub import get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not repo_id:
        raise LangadaptError("export.repo_id: required when export.push_to_hub is true (or pass --push-to-hub ORG/NAME)")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise LangadaptError(f"--push-to-hub {repo_id}: not a valid Hub repo id ({str(exc).splitlines()[0]})") from None
    if "/" not in repo_id:
        raise LangadaptError(f"--push-to-hub {repo_id}: give the owner too, e.g. my-org/{repo_id}")
    if revision is not None and not BRANCH.match(revision):
        raise LangadaptError(f"--revision {revision}: not a valid branch name (letters, digits, '.', '_', '-', '/')")
    if not get_token():
        raise LangadaptError("no Hugging Face token: set HF_TOKEN or run `hf auth login` before pushing")
    return repo_id


def push(folder: Path, repo_id: str, private: bool, revision: str | None = None,
         message: str = "Upload model exported by langadapt") -> str:
    """Create the repo (and branch) if needed and commit every file of `folder`; returns the commit URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    check_push(repo_id, revision)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    operations = [CommitOperationAdd(path_in_repo=p.relative_to(folder).as_posix(), path_or_fileobj=str(p))
                  for p in files]
    api = HfApi()
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.create_commit(repo_id, operations, commit_message=message, revision=revision)
    except Exception as exc:  # noqa: BLE001 - auth, network, quota: the user's to fix, named in one line
        raise LangadaptError(f"--push-to-hub {repo_id}: push failed ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return str(getattr(info, "commit_url", info))
