"""A short differential-fuzzer run of every named option set (and a few random ones): antkv
against RocksDB, every answer compared.  Part of ``make test``; ``make fuzz SECONDS=N``
runs the same machinery long.  A failure prints the divergence and a one-line reproducer.
"""

from __future__ import annotations

import io

import pytest

from fuzz import options_sets
from fuzz.generator import generate
from fuzz.runner import Config, report, run_stream, side_factory

OPS = 300
SETS = list(options_sets.NAMED) + ["random-1", "random-2", "random-3"]


@pytest.mark.parametrize("option_set", SETS)
def test_short_differential_run(option_set, tmp_path):
    seed = 1000 + SETS.index(option_set)
    cfg = Config(seed=seed, option_set=option_set, oracle="blob" if seed % 2 else "plain",
                 ops=OPS)
    ops = generate(cfg.seed, cfg.ops)
    r = run_stream(ops, side_factory("antkv", option_set), side_factory("rocksdb-" + cfg.oracle,
                   option_set), workdir=str(tmp_path))
    if r.divergence is not None:
        out = io.StringIO()
        report(cfg, r.divergence, len(ops), r.ops_run, out)
        pytest.fail(out.getvalue(), pytrace=False)
    assert r.ops_run == OPS


def test_every_named_option_set_is_valid():
    """Each named and random set builds real antkv.Options (no set silently falls back)."""
    import antkv

    assert len(options_sets.NAMED) >= 12
    for name in SETS + [f"random-{i}" for i in range(50)]:
        o = options_sets.build(name)
        assert isinstance(o, antkv.Options)
        for field, value in options_sets.overrides(name).items():
            got = getattr(o, field)
            if field == "merge_operator":  # a built-in's name: Options holds the operator it names
                got = got.name
            if not isinstance(value, options_sets.CacheSpec):
                assert got == value, (name, field)
