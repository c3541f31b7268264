"""Reading what a checkpoint location publishes: a batch's marker and a version's manifest,
each checked (:mod:`antkv.spark.store.objects` defines their bytes, :mod:`~antkv.spark.store.location`
their names)."""

from __future__ import annotations

from antkv import CorruptionError
from antkv.spark.store.location import Location, marker_name
from antkv.spark.store.objects import Manifest, Marker


def read_marker(location: Location, operator: str, version: int) -> Marker:
    """The marker of ``operator``'s batch ``version``; CorruptionError if it names another."""
    name = marker_name(operator, version)
    marker = Marker.decode(location.read(name), location.path(name))
    if marker.operator != operator or marker.version != version:
        raise CorruptionError(
            f"marker is for operator {marker.operator!r} version {marker.version}", location.path(name))
    return marker


def read_manifest(location: Location, name: str) -> Manifest:
    """The manifest object ``name`` of ``location``."""
    return Manifest.decode(location.read(name), location.path(name))
