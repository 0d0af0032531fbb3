"""The Free Spoken Digit Dataset (FSDD): real recordings of isolated English digits, 8 kHz.

Four of its speakers are used, and only these: jackson, nicolas, yweweler and lucas (50 takes of
each digit each, 2000 files). The dataset's other speakers (theo, george) are never read, even
when a downloaded archive has them: they are kept for evaluation by people outside the project.

Where the recordings come from (``locate``), in this order:

1. ``--fsdd DIR`` (a folder holding ``recordings/``);
2. ``$ASRKIT_CORPORA/fsdd-4spk``;
3. ``<repository>/../shared/corpora/fsdd-4spk`` (where tests and CI find it; the repository
   holding these recipes, or the one asrkit is installed from, for a copied recipe);
4. ``<download dir>/fsdd-4spk`` from an earlier download, else a download: the public archive
   of the dataset's repository at a pinned commit (``ARCHIVE_URL``), resumable (an interrupted
   download leaves ``.part``, continued with an HTTP Range request), its 2000 files checked
   against ``fsdd.sha256`` (committed here, sha256 of each file), extracted into a temporary
   folder renamed into place only when complete.

Licence CC BY-SA 4.0, attribution: the FSDD contributors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile

COMMIT = "26eb9aaf76e81b692f806f9140c2d2777410d7a1"  # v1.0.10 + 27 commits
ARCHIVE_URL = f"https://github.com/Jakobovski/free-spoken-digit-dataset/archive/{COMMIT}.zip"
SPEAKERS = ("jackson", "nicolas", "yweweler", "lucas")
SAMPLE_RATE = 8000
FOLDER = "fsdd-4spk"
MANIFEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsdd.sha256")
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
_NAME = re.compile(r"^(\d)_([a-z]+)_(\d+)\.wav$")


class FsddError(RuntimeError):
    """FSDD is missing, incomplete, corrupt or could not be downloaded (message says which)."""


@dataclasses.dataclass(frozen=True)
class Take:
    """One recording: ``digit`` (0-9, spoken "zero" for 0), ``speaker``, ``take`` (0-49)."""

    speaker: str
    digit: int
    take: int
    path: str


def read_manifest(path: str = MANIFEST) -> dict[str, str]:
    """``recordings/NAME.wav -> sha256`` from a ``sha256sum``-style file."""
    table = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if len(fields) != 2 or len(fields[0]) != 64:
                raise FsddError(f"{path}:{lineno}: expected 'SHA256  recordings/NAME.wav'")
            table[fields[1]] = fields[0]
    return table


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(root: str, manifest: dict[str, str] | None = None, full: bool = True) -> list[str]:
    """Problems of the copy at ``root`` against the manifest: missing files, and with ``full``
    files whose sha256 differs. [] when it is complete and intact."""
    manifest = read_manifest() if manifest is None else manifest
    problems = []
    for rel, digest in sorted(manifest.items()):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            problems.append(f"{path}: missing")
        elif full and _sha256(path) != digest:
            problems.append(f"{path}: sha256 differs from {os.path.relpath(MANIFEST, REPO)}")
    return problems


def _asrkit_repo() -> str | None:
    """The repository of the asrkit in use (an editable install), for a recipe copied away
    from it (as the tests do)."""
    try:
        import asrkit
    except ImportError:
        return None
    return os.path.dirname(os.path.dirname(os.path.abspath(asrkit.__file__)))


def default_download_dir() -> str:
    """``$ASRKIT_CORPORA``, else ``~/.cache/asrkit/corpora``."""
    return os.environ.get("ASRKIT_CORPORA") or os.path.join(
        os.path.expanduser("~"), ".cache", "asrkit", "corpora")


def locate(explicit: str | None = None, download_dir: str | None = None, download: bool = True,
           log=print) -> tuple[str, str]:
    """Find (or fetch) the four-speaker FSDD; returns ``(root, where it came from)``.

    See the module docstring for the order. ``explicit`` that lacks files is an error (no
    fallback: the user asked for it). Local copies are checked for missing files (their hashes
    on download only, where the bytes came over a network).
    """
    manifest = read_manifest()
    candidates = []
    if explicit:
        problems = verify(explicit, manifest, full=False)
        if problems:
            raise FsddError(f"--fsdd {explicit}: not a complete FSDD copy: {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        return explicit, f"--fsdd {explicit}"
    if os.environ.get("ASRKIT_CORPORA"):
        candidates.append((os.path.join(os.environ["ASRKIT_CORPORA"], FOLDER),
                           "$ASRKIT_CORPORA"))
    for repo in dict.fromkeys([REPO, _asrkit_repo()]):
        if repo:
            candidates.append((os.path.join(repo, "..", "shared", "corpora", FOLDER),
                               "the shared corpora folder"))
    target = os.path.join(download_dir or default_download_dir(), FOLDER)
    candidates.append((target, "an earlier download"))
    for root, what in candidates:
        if os.path.isdir(root) and not verify(root, manifest, full=False):
            return os.path.abspath(root), f"{what} ({os.path.abspath(root)})"
    if not download:
        raise FsddError("FSDD not found (give --fsdd DIR or set ASRKIT_CORPORA)")
    fetch(target, log=log)
    return target, f"downloaded from {ARCHIVE_URL} ({target})"


def download_file(url: str, dest: str, log=print, timeout: float = 60.0) -> None:
    """Download ``url`` to ``dest``, resuming ``dest + '.part'`` with an HTTP Range request
    (a server that ignores the range sends the whole file, which then starts over); the
    ``.part`` is renamed to ``dest`` when complete."""
    part = dest + ".part"
    have = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "asrkit-recipes"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing after what we have: the .part is whole
            os.replace(part, dest)
            return
        raise FsddError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise FsddError(f"{url}: {getattr(e, 'reason', e)} (no network? give --fsdd DIR with "
                        "a local copy)") from None
    with response:
        resumed = response.status == 206
        if have and not resumed:
            log(f"fsdd: the server ignored the range request; downloading {url} again")
        total = response.headers.get("Content-Length")
        mode = "ab" if resumed else "wb"
        done = have if resumed else 0
        log(f"fsdd: downloading {url}" + (f" from byte {have}" if resumed else ""))
        with open(part, mode) as f:
            while True:
                block = response.read(1 << 20)
                if not block:
                    break
                f.write(block)
                done += len(block)
        if total is not None and done < (have if resumed else 0) + int(total):
            raise FsddError(f"{url}: connection closed after {done} bytes; run again to resume")
    os.replace(part, dest)


def extract(archive: str, target: str, manifest: dict[str, str]) -> None:
    """Extract the manifest's files (``recordings/...`` under the archive's top folder) from
    the zip ``archive`` into ``target``, checking each hash; atomic: a temporary folder beside
    ``target`` is renamed to it when every file is in place."""
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}-", dir=parent)
    try:
        try:
            zf = zipfile.ZipFile(archive)
        except zipfile.BadZipFile:
            os.unlink(archive)
            raise FsddError(f"{archive}: not a zip archive (removed; run again to download "
                            "it anew)") from None
        with zf:
            members = {}
            for name in zf.namelist():
                rel = name.split("/", 1)[-1]
                if rel in manifest:
                    members[rel] = name
            missing = sorted(set(manifest) - set(members))
            if missing:
                raise FsddError(f"{archive}: lacks {len(missing)} of the {len(manifest)} files, "
                                f"e.g. {missing[0]}")
            for rel, name in sorted(members.items()):
                data = zf.read(name)
                if hashlib.sha256(data).hexdigest() != manifest[rel]:
                    raise FsddError(f"{archive}: {rel}: sha256 differs from "
                                    f"{os.path.relpath(MANIFEST, REPO)}")
                path = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
        if os.path.exists(target):
            shutil.rmtree(target)
        os.rename(tmp, target)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def fetch(target: str, url: str = ARCHIVE_URL, manifest: dict[str, str] | None = None,
          log=print) -> None:
    """Download the pinned archive next to ``target`` and extract the four speakers into it."""
    manifest = read_manifest() if manifest is None else manifest
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    archive = os.path.join(os.path.dirname(os.path.abspath(target)), f"fsdd-{COMMIT[:12]}.zip")
    if not os.path.exists(archive):
        download_file(url, archive, log=log)
    extract(archive, target, manifest)
    os.unlink(archive)
    log(f"fsdd: {len(manifest)} files verified in {target}")


def takes(root: str, speakers=SPEAKERS) -> list[Take]:
    """The recordings of ``speakers`` (only ever the four of ``SPEAKERS``), sorted."""
    unknown = set(speakers) - set(SPEAKERS)
    if unknown:
        raise FsddError(f"FSDD speaker(s) {sorted(unknown)} are not used here (only "
                        f"{', '.join(SPEAKERS)})")
    out = []
    folder = os.path.join(root, "recordings")
    for name in sorted(os.listdir(folder)):
        m = _NAME.match(name)
        if m and m.group(2) in speakers:
            out.append(Take(m.group(2), int(m.group(1)), int(m.group(3)),
                            os.path.join(folder, name)))
    return sorted(out, key=lambda t: (t.speaker, t.digit, t.take))
