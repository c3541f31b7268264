"""``antkv state-verify``: check, read-only, that every retained version of a Spark pipeline's
checkpoint location can load.

A published version is its marker (``_batches``), which names one manifest per partition;
each manifest names every object the version needs -- snapshot files and changelogs -- with
the size and xxh3_128 they must have (:mod:`antkv.spark.store.objects`).  This reads every marker
and manifest (their own checksums are checked as they decode) and every object they name,
comparing its size and hash with the manifest's record.  An object shared by several
versions is read once.  Nothing is written to the location and no local cache is used: the
bytes checked are the location's own.
"""

from __future__ import annotations

import xxhash

from .. import errors

READ_CHUNK = 4 << 20


def _object_problem(loc, ref) -> str | None:
    """What is wrong with the object ``ref`` names (missing, wrong size, wrong hash), or None."""
    path = loc.path(ref.object)
    h = xxhash.xxh3_128()
    size = 0
    try:
        with loc.fs.open_input_stream(path) as f:
            while True:
                chunk = f.read(READ_CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        raise errors.IOError(f"cannot read {path}: {e}", e, path) from e
    if size != ref.size:
        return f"{size} bytes, its manifest records {ref.size}"
    if h.hexdigest() != ref.xxh3:
        return "damaged: its xxh3_128 differs from its manifest's record"
    return None


def verify_location(loc, operator: str | None = None, version: int | None = None) -> list[dict]:
    """Per operator (or only ``operator``; every retained version, or only ``version``):
    ``{"operator", "location", "versions", "intact_versions", "manifests", "objects", "bytes",
    "problems", "incomplete_uploads"}``, each problem ``{"object", "problem", "versions"}`` (the
    versions it breaks), each upload ``{"object", "initiated"}`` (ISO 8601); ``incomplete_uploads``
    is None where they cannot be seen."""
    from ..spark import CommitCoordinator
    from antkv.spark.store.multipart import incomplete_uploads
    from antkv.spark.tools.state_reader import operators, published_versions

    names = operators(loc) if operator is None else [operator]
    if not names:
        raise errors.InvalidArgumentError(
            f"{loc.uri}: no operator has a published version here (not a pipeline's checkpoint location?)")
    report = []
    for op in names:
        versions = published_versions(loc, op)
        if not versions:
            raise errors.InvalidArgumentError(f"{loc.uri}: operator {op!r} has no published version")
        if version is not None:
            if version not in versions:
                raise errors.InvalidArgumentError(
                    f"{loc.uri}: operator {op!r} has no published version {version} "
                    f"(published: {versions[0]}..{versions[-1]})")
            versions = [version]
        check = _Checker(loc, CommitCoordinator(loc, op, 1, query_id="verify"))
        problems: dict[str, dict] = {}
        for v in versions:
            for name, problem in check.version(v):
                problems.setdefault(name, {"object": name, "problem": problem, "versions": []})["versions"].append(v)
        damaged = {v for p in problems.values() for v in p["versions"]}
        uploads = incomplete_uploads(loc, f"{op}/")
        report.append({
            "operator": op, "location": loc.uri, "versions": versions,
            "intact_versions": [v for v in versions if v not in damaged], "manifests": len(check.manifests),
            "objects": len(check.objects), "bytes": sum(check.objects.values()), "problems": list(problems.values()),
            "incomplete_uploads": None if uploads is None else [
                {"object": u.name, "initiated": u.initiated.isoformat()} for u in uploads],
        })
    return report


class _Checker:
    """Checks the versions of one operator, each manifest and object once."""

    def __init__(self, loc, coordinator):
        self.loc = loc
        self.coordinator = coordinator
        self.manifests: dict[str, list | str] = {}  # manifest -> the refs it names, or its problem
        self.objects: dict[str, int] = {}  # data object -> its recorded size
        self.verdicts: dict[str, str | None] = {}  # data object -> its problem, or None

    def version(self, v: int):
        """``(object, problem)`` for everything that keeps version ``v`` from loading."""
        from antkv.spark.tools.state_reader import read_manifest

        try:
            marker = self.coordinator.marker(v)
        except errors.CorruptionError as e:
            yield e.path or f"the marker of version {v}", f"unreadable marker: {e}"
            return
        for name in marker.manifests:
            refs = self.manifests.get(name)
            if refs is None:
                try:
                    manifest = read_manifest(self.loc, name)
                except errors.CorruptionError as e:
                    refs = f"unreadable manifest: {e}"
                else:
                    snapshot = manifest.snapshot.files if manifest.snapshot is not None else ()
                    refs = [*snapshot, *manifest.changelogs]
                self.manifests[name] = refs
            if isinstance(refs, str):
                yield name, refs
                continue
            for ref in refs:
                if ref.object not in self.verdicts:
                    self.verdicts[ref.object] = _object_problem(self.loc, ref)
                    self.objects[ref.object] = ref.size
                if self.verdicts[ref.object] is not None:
                    yield ref.object, self.verdicts[ref.object]
