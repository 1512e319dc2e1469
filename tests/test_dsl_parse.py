"""DSL program text is parsed by an AST walk, never evaluated: the DSL's own calls and literals
build the same Program as before; anything else is refused with its line, column and node."""
from __future__ import annotations

import pytest

from flexpipe_ui.dsl import Program, Rules, RulesError, explicit, looped, program_from_source, vshape
from flexpipe_ui.kinds import scoped_kinds
from flexpipe_ui.library import NAMED, build_named
from flexpipe_ui.ops import register_recompute


def test_every_dsl_program_source_round_trips():
    with scoped_kinds():
        register_recompute()              # the R of extra={"R": "all"}
        _round_trips()


def _round_trips():
    progs = [Program(placement=vshape(), rules=Rules(backward="split", priority=("I", "F", "W"), in_flight="2*p")),
             Program(placement=looped(2), rules=Rules(in_flight="2 * p").on(1, warmup=3, traversal="breadth")),
             Program(rules=Rules(memory_cap=12.5, w_policy="fill", backward="split"), extra={"R": "all"})]
    for name in NAMED:
        src = build_named(name, None, ranks=4, microbatches=8).meta.get("program", "")
        if src.startswith("Program("):
            progs.append(program_from_source(src))
    assert len(progs) >= 5
    for p in progs:
        assert program_from_source(p.source()) == p
        assert program_from_source(p.source()).source() == p.source()
    assert program_from_source("Program(rules=Rules().on(1, in_flight=2).with_(traversal='breadth'))") == \
        Program(rules=Rules().on(1, in_flight=2).with_(traversal="breadth"))
    assert program_from_source("Program(placement=looped(+2))") == Program(placement=looped(2))
    assert program_from_source("Program(placement=explicit([0, 1, 1, 0]))") == Program(placement=explicit([0, 1, 1, 0]))


@pytest.mark.parametrize("text,where,what", [
    ("().__class__", "column 1", "Attribute"),
    ("Program(rules=Rules(priority=('I', 'F', 'W')),\n placement=__import__('os'))", "line 2, column 12", "unknown name '__import__'"),
    ("Program(placement=vshape(), rules=[r for r in ()])", "column 35", "ListComp"),
    ("Program(placement=lambda p: p)", "column 19", "Lambda"),
    ("Program(rules=Rules(in_flight=1 + 1))", "column 31", "BinOp"),
    ("Program(placement=vshape)", "column 19", "Name"),
    ("Program(**{})", "column 1", "'*' and '**'"),
    ("Program(rules=Rules().__init__())", "column 15", "Attribute"),
    ("Program(placement=vshape()).on(1)", "column 1", "not a method of Program"),
    ("Program(rules=Rules(in_flight=f'{1}'))", "column 31", "JoinedStr"),
])
def test_refused_with_position_and_node(text, where, what):
    with pytest.raises(RulesError) as e:
        program_from_source(text)
    assert where in str(e.value) and what in str(e.value), str(e.value)


def test_nothing_runs_and_size_limits(tmp_path):
    marker = tmp_path / "ran"
    escape = ("[c for c in ().__class__.__base__.__subclasses__() if c.__name__=='BuiltinImporter'][0]"
              f".load_module('os').system('touch {marker}')")
    with pytest.raises(RulesError, match="only calls of the DSL's own names"):
        program_from_source(escape)
    assert not marker.exists()
    with pytest.raises(RulesError, match="MAX_DSL_DEPTH"):
        program_from_source("Program(rules=Rules(priority=" + "[" * 40 + "]" * 40 + "))")
    with pytest.raises(RulesError, match="MAX_DSL_CHARS"):
        program_from_source("Program()" + " " * 20000)
    with pytest.raises(RulesError, match="does not describe a Program"):
        program_from_source("Rules()")
    with pytest.raises(RulesError, match="syntax error at line 1"):
        program_from_source("Program(")
