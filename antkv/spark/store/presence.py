"""Whether the objects a version needs are in the checkpoint location, whole.

A version loads when its marker, every manifest the marker names and every object those
manifests name (snapshot files and changelogs, each with the size its manifest records) are
in the location.  The state store relies on three checks built on this module, so that the
newest version that loads survives the loss or truncation of any one object
(``docs/spark-design.md``, "Guarantees and their limits"):

* a working copy kept open in an executor is reused only once the objects its version names
  are found, at their sizes, in one listing of each directory they live in (no download);
* ``CommitCoordinator.publish`` refuses a manifest naming an object the location lacks;
* ``CommitCoordinator.cleanup`` keeps the newest version that loads, and all it needs.

A listing may miss an object written a moment ago (``Location.list_dir``): an object absent
from a listing is looked up once more on its own before it is called missing, so a listing
that lags never refuses a good version.  A size that differs from the manifest's is damage.
"""

from __future__ import annotations

from antkv.spark.store.location import Location
from antkv.spark.store.objects import Manifest


def needed_objects(manifest: Manifest) -> dict[str, int]:
    """``{object name: size}`` of every object ``manifest``'s version needs besides itself."""
    out = {c.object: c.size for c in manifest.changelogs}
    if manifest.snapshot is not None:
        out.update((f.object, f.size) for f in manifest.snapshot.files)
    return out


class Listing:
    """The sizes of a location's objects, one listing per directory, taken on first need."""

    def __init__(self, location: Location):
        self.location = location
        self.dirs: dict[str, dict[str, int]] = {}  # directory -> {base name: size}

    def directory(self, directory: str) -> dict[str, int]:
        listed = self.dirs.get(directory)
        if listed is None:
            listed = self.dirs[directory] = self.location.list_sizes(directory)
        return listed

    def size(self, name: str) -> int | None:
        """The listed size of object ``name`` (None: not listed)."""
        directory, _, base = name.rpartition("/")
        return self.directory(directory).get(base)

    def damaged(self, needed: dict[str, int | None], *, confirm: bool = True) -> list[str]:
        """The names among ``needed`` (``{name: size, or None for any size}``) that are missing
        or of another size, each with what is wrong.  With ``confirm``, an object absent from
        the listing is looked up on its own before it counts as missing."""
        out = []
        for name, want in sorted(needed.items()):
            have = self.size(name)
            if have is None and confirm:
                have = self.location.size(name)
            if have is None:
                out.append(f"{name} (missing)")
            elif want is not None and have != want:
                out.append(f"{name} ({have} bytes, its manifest says {want})")
        return out
