#!/usr/bin/env python3
"""Download and unpack LibriSpeech (OpenSLR SLR12) and, optionally, its LM resources (SLR11).

Resumable: a partial download is kept as ``NAME.part`` and continued with an HTTP Range request;
a finished archive is checked against OpenSLR's MD5 sums before it is unpacked, and a marker file
records a finished unpack, so rerunning after an interruption redoes nothing that is done. Mirrors
are tried in turn.

Usage: download.py DEST [--parts dev-clean test-clean train-clean-100 ...] [--lm]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import sys
import tarfile
import time
import urllib.error
import urllib.request

MIRRORS = ["https://www.openslr.org/resources", "https://us.openslr.org/resources",
           "https://openslr.elda.org/resources"]

# From https://www.openslr.org/resources/12/md5sum.txt
MD5 = {
    "dev-clean": "42e2234ba48799c1f50f24a7926300a1",
    "dev-other": "c8d0bcc9cca99d4f8b62fcc847357931",
    "test-clean": "32fa31d27d2e1cad72775fee3f4849a9",
    "test-other": "fb5a50374b501bb3bac4815ee91d3135",
    "train-clean-100": "2a93770f6d5c6c964bc36631d331a522",
    "train-clean-360": "c0e676e450a7ff2f54aeade5171606fa",
    "train-other-500": "d1a0fd59409feb2c614ce4d30c387708",
}
# SLR11: lexicon and LM text; no published checksums, so only their sizes are checked (non-empty)
LM_FILES = ["librispeech-lexicon.txt", "librispeech-vocab.txt", "3-gram.pruned.1e-7.arpa.gz",
            "4-gram.arpa.gz"]


def md5sum(path: str, chunk: int = 1 << 22) -> str:
    """Hex MD5 of a file, read in chunks."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def fetch(url: str, dest: str, retries: int = 3) -> None:
    """Download ``url`` to ``dest``, resuming ``dest.part`` if present; atomic rename at the end."""
    part = dest + ".part"
    for attempt in range(1, retries + 1):
        have = os.path.getsize(part) if os.path.exists(part) else 0
        req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                if have and r.status != 206:  # server ignored the range: start over
                    have = 0
                total = have + int(r.headers.get("Content-Length", 0))
                with open(part, "ab" if have else "wb") as f:
                    done, last = have, time.time()
                    while True:
                        block = r.read(1 << 20)
                        if not block:
                            break
                        f.write(block)
                        done += len(block)
                        if time.time() - last > 5:
                            print(f"  {os.path.basename(dest)}: {done / 1e6:.0f} / "
                                  f"{total / 1e6:.0f} MB", file=sys.stderr)
                            last = time.time()
                if total > have and done < total:
                    raise ConnectionError(f"connection closed at {done} of {total} bytes")
            os.replace(part, dest)
            return
        except urllib.error.HTTPError as e:
            if e.code == 416:  # range not satisfiable: the part is already complete
                os.replace(part, dest)
                return
            err = e
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError,
                ConnectionError) as e:
            err = e
        print(f"  {url}: attempt {attempt} failed: {err}", file=sys.stderr)
        time.sleep(2 * attempt)
    raise RuntimeError(f"could not download {url}: {err}")


def download_archive(dest_dir: str, resource: int, name: str, md5: str | None) -> str:
    """Fetch ``name`` of OpenSLR resource ``resource`` into ``dest_dir`` from the first mirror
    that works; verify ``md5`` when given. Returns the archive's path."""
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, name)
    if os.path.exists(path) and (md5 is None or md5sum(path) == md5):
        return path
    errors = []
    for mirror in MIRRORS:
        try:
            fetch(f"{mirror}/{resource}/{name}", path)
            break
        except RuntimeError as e:
            errors.append(str(e))
    else:
        raise RuntimeError("all mirrors failed:\n" + "\n".join(errors))
    if md5 is not None:
        got = md5sum(path)
        if got != md5:
            os.unlink(path)
            raise RuntimeError(f"{path}: MD5 {got} does not match OpenSLR's {md5}; removed it, "
                               "run again to download it anew")
    return path


def unpack(archive: str, dest_dir: str) -> None:
    """Extract a .tar.gz into ``dest_dir`` (refusing paths outside it); marker file when done."""
    marker = os.path.join(dest_dir, f".{os.path.basename(archive)}.unpacked")
    if os.path.exists(marker):
        return
    with tarfile.open(archive) as tar:
        tar.extractall(dest_dir, filter="data")
    open(marker, "w").close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dest", help="download folder (gets LibriSpeech/ and the archives)")
    p.add_argument("--parts", nargs="+", default=["dev-clean", "test-clean", "train-clean-100"],
                   choices=sorted(MD5))
    p.add_argument("--lm", action="store_true", help="also fetch SLR11 lexicon and LMs")
    p.add_argument("--keep-archives", action="store_true")
    args = p.parse_args(argv)
    for part in args.parts:
        print(f"LibriSpeech {part}", file=sys.stderr)
        archive = download_archive(args.dest, 12, f"{part}.tar.gz", MD5[part])
        unpack(archive, args.dest)
        if not args.keep_archives:
            os.unlink(archive)
    if args.lm:
        for name in LM_FILES:
            path = download_archive(os.path.join(args.dest, "lm"), 11, name, None)
            if os.path.getsize(path) == 0:
                raise RuntimeError(f"{path} is empty")
    return 0


if __name__ == "__main__":
    sys.exit(main())
