"""The heuristic baseline: the careless query, then a few cheap, generic checks of the evidence.

It stands for a cautious scripted analyst. It may use only what such an analyst would have written or
read: the question text, the careless SQL (the query a hasty analyst writes for the question), and from
the grading only the answer spec (column, type, unit), the evidence tables and the entity ids the question
names. It never sees the reference SQL, the expected status, the outcome or the patch (`Clues` holds all
it is given). The steps, in the order they run (each is one SQL call at most):

0. Dates: when the careless query names dates the question does not, and the question names as many
   dates the query lacks, the query is re-run with the question's dates (it asked about another day).
1. Empty answer: the query fails, returns no rows, or a NULL answer -> abstain.
2. Unknown entity: every id the question names must exist in its table of record (patients.subject_id,
   admissions.hadm_id or icustays.stay_id; one UNION ALL query, an id may be any of the three kinds since
   their ranges do not collide) -> abstain when one does not (an unknown patient, an orphaned admission).
3. Evidence rows (patient questions whose first evidence table the query reads): every SELECT of the
   query that reads that table is rewritten by sqlglot to return the raw rows it filters (`alias.*`,
   plus the dictionary label when it joins d_items/d_labitems), one UNION ALL query. On them:
   a. coverage: each named id must appear in an id column of the rows; rows that exist but belong to
      other admissions/stays mean the question's premise is not in the record -> abstain;
   b. conflict: for event tables with a dictionary (`clinical.VALUE_TABLES`: labevents, chartevents),
      the same item charted at the same time with two different values -> abstain (which is true?);
   c. plausibility: any value outside `clinical.LIMITS` for its label and unit -> abstain;
   d. exact duplicate rows (every column equal) are double entries: the table is read through
      `SELECT DISTINCT *` in the final query.
   Population questions (no ids) read the first evidence table through `SELECT DISTINCT *` always (a
   cohort count must not count a double entry twice) and fetch only the distinct (item, unit) pairs.
4. Units: rows of an item in the other unit of one of its `clinical.CONVERSIONS` (glucose in mmol/L,
   weight in lb) are converted back into the stored unit in the final query (`clinical.replace_source`).
   When 3d/4 changed the query it is run again and its answer replaces the first (empty -> abstain).
5. Implausible answer: a numeric answer that is a reading of an item (MIN/MAX/AVG or the bare value
   column; the label is a string literal of the SQL or named in the question) outside `clinical.LIMITS`
   for that label and unit -> abstain.

Not attempted (they need knowledge beyond these clues): misspelled or synonymous names, dictionary typos,
dotted ICD codes, time windows the careless query dropped, NULL readings it filtered out.

Otherwise it answers like the naive baseline, but with the unit (the unit column, else the spec's unit).
Before any abstention it makes sure one successful call read an evidence table with a named id (the
verifier's evidence rule), running a small evidence query if none did.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlglot import exp

from pipeline.agents.base import Observation, Script, ScriptedAgent, column_values, read_answer, result_of
from pipeline.agents.oracle import counts_as_evidence, evidence_query
from pipeline.ehr.schema import TABLES
from pipeline.gym.episodes import Episode
from pipeline.noise.clinical import CONVERSIONS, LIMITS, VALUE_TABLES, Conversion, limits_for, replace_source
from pipeline.noise.operators.unknown_entity import RECORD
from pipeline.sql.schema import DIALECT, parse
from pipeline.tasks.template import AnswerSpec

ID_TABLES = tuple((table, column) for column, table in RECORD.items())  # (table of record, id column)
ID_COLUMNS = tuple(column for _, column in ID_TABLES)
ROW_LIMIT = 5000  # evidence rows fetched per check; a patient's rows for one question are far fewer
PART = "ev_part"
LABEL = "ev_label"


@dataclass(frozen=True)
class Clues:
    """Everything the heuristic is allowed to know about an episode."""

    question: str
    careless_sql: str
    spec: AnswerSpec
    evidence_tables: tuple[str, ...]
    entity_ids: tuple[int, ...]

    @classmethod
    def of(cls, episode: Episode) -> Clues:
        g = episode.grading
        return cls(episode.question, episode.careless_sql, g.spec, g.evidence_tables, g.entity_ids)


# -- SQL the checks run ------------------------------------------------------------------------------

def existence_query(ids: Sequence[int]) -> str:
    """Which of `ids` exist in a table of record (one row per hit, column `id`)."""
    listed = ", ".join(str(int(i)) for i in ids)
    union = " UNION ALL ".join(f"SELECT {column} AS id FROM {table} WHERE {column} IN ({listed})"
                               for table, column in ID_TABLES)
    return f"SELECT id FROM ({union}) AS known ORDER BY id"


def _sources(select: exp.Select) -> list[exp.Expression]:
    from_ = select.args.get("from_")
    return ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]


def _reads(tree: exp.Expression, table: str) -> list[tuple[exp.Select, exp.Table]]:
    """Each SELECT that reads base table `table` directly in its FROM or JOINs, with that table node."""
    if table in {c.alias_or_name.casefold() for c in tree.find_all(exp.CTE)}:
        return []
    hits = []
    for select in tree.find_all(exp.Select):
        node = next((s for s in _sources(select) if isinstance(s, exp.Table) and s.name.casefold() == table), None)
        if node is not None:
            hits.append((select, node))
    return hits


def evidence_rows_query(sql: str, table: str, columns: Sequence[str] = ("*",), distinct: bool = False,
                        limit: int | None = ROW_LIMIT) -> str | None:
    """The rows of `table` that the query's SELECTs filter: `alias.<columns>`, the dictionary label (when the
    SELECT joins the table's dictionary) and the part index (which SELECT). The query's CTEs are kept, since
    a filter may use them. None when the query does not read `table`."""
    try:
        tree = parse(sql)
    except ValueError:
        return None
    dictionary = VALUE_TABLES[table].dictionary if table in VALUE_TABLES else None
    bodies: list[tuple[str, str]] = []  # (projection, FROM ... WHERE ...)
    for select, node in _reads(tree, table):
        alias = node.alias_or_name
        label = "CAST(NULL AS VARCHAR)"
        for source in _sources(select):
            if dictionary and isinstance(source, exp.Table) and source.name.casefold() == dictionary:
                label = f"{source.alias_or_name}.label"
        projection = ", ".join(f"{alias}.{c}" for c in columns)
        joins = " ".join(j.sql(dialect=DIALECT) for j in select.args.get("joins") or [])
        where = select.args.get("where")
        rest = f"{select.args['from_'].sql(dialect=DIALECT)} {joins}"
        rest += f" {where.sql(dialect=DIALECT)}" if where is not None else ""
        body = (f"{'DISTINCT ' if distinct else ''}{projection}, {label} AS {LABEL}", rest)
        if body not in bodies:  # the same filter in two CTEs is read once
            bodies.append(body)
    if not bodies:
        return None
    with_ = tree.args.get("with_")
    prefix = with_.sql(dialect=DIALECT) + " " if with_ is not None else ""
    union = " UNION ALL ".join(f"SELECT {head}, {i} AS {PART} {rest}" for i, (head, rest) in enumerate(bodies))
    return f"{prefix}{union}" + (f" LIMIT {limit}" if limit else "")


def deduplicated_query(sql: str, table: str) -> str | None:
    """`sql` with every read of base table `table` going through `(SELECT DISTINCT * FROM table)`."""
    try:
        tree = parse(sql)
    except ValueError:
        return None
    ctes = {c.alias_or_name.casefold() for c in tree.find_all(exp.CTE)}
    if table in ctes:
        return None
    nodes = [t for t in tree.find_all(exp.Table) if t.name.casefold() == table]
    if not nodes:
        return None
    for node in nodes:
        source = exp.select("*").from_(table).distinct()
        alias = exp.TableAlias(this=exp.to_identifier(node.alias or node.name))
        node.replace(exp.Subquery(this=source, alias=alias))
    return tree.sql(dialect=DIALECT)


_DATE = re.compile(r"(?<!\d)\d{4}-\d{2}-\d{2}(?!\d)")


def aligned_dates_query(sql: str, question: str) -> str | None:
    """`sql` with its dates replaced by the question's, when the query names dates the question does not and
    the question names as many dates the query lacks (paired in calendar order); None when they agree."""
    in_sql = list(dict.fromkeys(_DATE.findall(sql)))
    in_question = list(dict.fromkeys(_DATE.findall(question)))
    extra = sorted(d for d in in_sql if d not in in_question)
    wanted = sorted(d for d in in_question if d not in in_sql)
    if not extra or len(extra) != len(wanted):
        return None
    for old, new in zip(extra, wanted, strict=True):
        sql = sql.replace(old, new)
    return sql


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def unit_repair(rows: Sequence[dict[str, Any]], table: str) -> dict[str, str] | None:
    """Column rewrites (for `clinical.replace_source`) that convert rows of an item reported in the other unit
    of one of its `clinical.CONVERSIONS` back into the unit the EHR stores it in; None when there are none."""
    spec = VALUE_TABLES.get(table)
    if spec is None or spec.dictionary is None:
        return None
    units: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for row in rows:
        if row.get(LABEL) is not None and row.get(spec.unit) is not None and row.get("itemid") is not None:
            units[row[LABEL]][row[spec.unit]].add(int(row["itemid"]))
    cases: list[tuple[str, Conversion]] = []
    for label, found in units.items():
        for conversion in CONVERSIONS.get(label, ()):
            if conversion.to in found:
                ids = ", ".join(str(i) for i in sorted(found[conversion.to]))
                cases.append((f"itemid IN ({ids}) AND {spec.unit} = {_quote(conversion.to)}", conversion))
    if not cases:
        return None
    columns = [c for c in (spec.value, "ref_range_lower", "ref_range_upper") if c in TABLES[table].columns]
    rewrites = {c: "CASE " + " ".join(f"WHEN {cond} THEN {conv.back_sql(c)}" for cond, conv in cases)
                + f" ELSE {c} END" for c in columns}
    rewrites[spec.unit] = ("CASE " + " ".join(f"WHEN {cond} THEN {_quote(conv.unit)}" for cond, conv in cases)
                           + f" ELSE {spec.unit} END")
    return rewrites


# -- checks on results -------------------------------------------------------------------------------

def rows_as_dicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    columns = result.get("columns") or []
    return [dict(zip(columns, row, strict=False)) for row in result.get("rows") or []]


def uncovered_ids(rows: Sequence[dict[str, Any]], ids: Iterable[int]) -> list[int]:
    """Named ids that appear in no id column of the evidence rows (only when the rows have id columns)."""
    present = {row[c] for row in rows for c in ID_COLUMNS if row.get(c) is not None}
    if not rows or not any(c in rows[0] for c in ID_COLUMNS):
        return []
    return [i for i in ids if i not in present]


def conflicting(rows: Sequence[dict[str, Any]], table: str) -> list[str]:
    """Items charted twice at the same time with different values (event tables with a dictionary)."""
    spec = VALUE_TABLES.get(table)
    if spec is None or spec.dictionary is None:
        return []
    values: dict[tuple[Any, ...], set[Any]] = defaultdict(set)
    for row in rows:
        value = row.get(spec.value)
        if value is None or row.get(spec.time) is None:
            continue
        key = (row.get(PART), row.get("subject_id"), row.get("stay_id"), row.get("itemid"), row.get(spec.time))
        values[key].add(value)
    return [f"item {k[3]} at {k[4]}: {sorted(v)}" for k, v in values.items() if len(v) > 1]


def implausible(rows: Sequence[dict[str, Any]], table: str) -> list[str]:
    """Values outside the physiological limits for their label and unit."""
    spec = VALUE_TABLES.get(table)
    if spec is None:
        return []
    out = []
    for row in rows:
        label = row.get(LABEL) or (row.get(spec.name) if spec.name else None)
        value = row.get(spec.value)
        lim = limits_for(label, row.get(spec.unit))
        if lim is not None and isinstance(value, int | float) and not lim.contains(float(value)):
            out.append(f"{label} {value} {row.get(spec.unit)}")
    return out


def has_exact_duplicates(rows: Sequence[dict[str, Any]]) -> bool:
    seen: set[str] = set()
    for row in rows:
        key = repr(sorted(row.items()))
        if key in seen:
            return True
        seen.add(key)
    return False


_READING = (exp.Min, exp.Max, exp.Avg)


def reading_label(sql: str, question: str) -> str | None:
    """The item label when the answer is a reading of one item (MIN/MAX/AVG or the bare value column):
    a string literal of the SQL that is a LIMITS label, else the longest LIMITS label named in the question."""
    try:
        tree = parse(sql)
    except ValueError:
        return None
    answer = next((p for p in getattr(tree, "expressions", []) if p.alias_or_name == "answer"), None)
    if answer is None:
        return None
    inner = answer.this if isinstance(answer, exp.Alias) else answer
    while isinstance(inner, exp.Cast):
        inner = inner.this
    if isinstance(inner, _READING):
        inner = inner.this
        while isinstance(inner, exp.Cast):
            inner = inner.this
    if not isinstance(inner, exp.Column) or inner.name not in {v.value for v in VALUE_TABLES.values()}:
        return None
    labels = [lit.this for lit in tree.find_all(exp.Literal) if lit.is_string and lit.this in LIMITS]
    if len(set(labels)) == 1:
        return labels[0]
    named = [label for label in LIMITS if re.search(rf"(?<!\w){re.escape(label)}(?!\w)", question, re.IGNORECASE)]
    return max(named, key=len) if named else None


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except (TypeError, ValueError):
        return None


# -- the agent ---------------------------------------------------------------------------------------

class HeuristicAgent(ScriptedAgent):
    name = "heuristic"
    privileged = True

    def reset(self, obs: Observation, info: dict[str, Any], episode: Episode | None,
              rng: np.random.Generator) -> None:
        super().reset(obs, info, episode, rng)
        assert episode is not None
        self.clues = Clues.of(episode)
        self.episode = None  # only the clues from here on
        self.verdict: str | None = None  # why it abstained (None: it answered)
        self._read: list[str] = []  # queries that ran without error

    def _ran(self, query: str, obs: Observation) -> dict[str, Any]:
        result = result_of(obs)
        if result.get("ok"):
            self._read.append(query)
        return result

    def _quit(self, verdict: str) -> Script:
        """Abstain for `verdict`, after an evidence read if no successful query was one."""
        c = self.clues
        self.verdict = verdict
        if not any(counts_as_evidence(q, c.evidence_tables, c.entity_ids) for q in self._read):
            yield self.sql(evidence_query(c.evidence_tables, c.entity_ids))
        yield self.abstain()

    def script(self, obs: Observation) -> Script:
        c = self.clues
        sql = c.careless_sql
        obs = yield self.sql(sql)
        result = self._ran(sql, obs)
        aligned = aligned_dates_query(sql, c.question)
        if aligned is not None:  # the query names other dates than the question: ask the question's
            sql = aligned
            obs = yield self.sql(sql)
            result = self._ran(sql, obs)
        answer, unit = read_answer(result, c.spec)
        if answer is None:
            yield from self._quit("empty: no rows or a NULL answer")
            return
        if c.entity_ids:
            query = existence_query(c.entity_ids)
            obs = yield self.sql(query)
            found = column_values(self._ran(query, obs), "id")
            missing = [i for i in c.entity_ids if found is not None and i not in found]
            if missing:
                yield from self._quit(f"unknown entity: {missing}")
                return
        table = c.evidence_tables[0] if c.evidence_tables else None
        repaired, rows = sql, []
        if table is not None and c.entity_ids:
            query = evidence_rows_query(sql, table)
            if query is not None:
                obs = yield self.sql(query)
                result = self._ran(query, obs)
                rows = rows_as_dicts(result) if result.get("ok") else []
                problems = [(name, found) for name, found in (
                    ("named id not in the evidence rows", uncovered_ids(rows, c.entity_ids)),
                    ("conflicting values", conflicting(rows, table)),
                    ("implausible value", implausible(rows, table))) if found]
                if problems:
                    name, found = problems[0]
                    yield from self._quit(f"{name}: {', '.join(map(str, found[:3]))}")
                    return
                if has_exact_duplicates(rows):
                    repaired = deduplicated_query(repaired, table) or repaired
        elif table is not None:  # a population: count distinct rows, and look at the units of the values
            repaired = deduplicated_query(repaired, table) or repaired
            spec = VALUE_TABLES.get(table)
            query = (evidence_rows_query(sql, table, ("itemid", spec.unit), distinct=True, limit=None)
                     if spec is not None and spec.dictionary is not None else None)
            if query is not None:
                obs = yield self.sql(query)
                result = self._ran(query, obs)
                rows = rows_as_dicts(result) if result.get("ok") else []
        rewrites = unit_repair(rows, table) if table is not None else None
        if rewrites is not None and table is not None:
            repaired = replace_source(repaired, table, rewrites).sql(dialect=DIALECT)
        if repaired != sql:
            obs = yield self.sql(repaired)
            result = self._ran(repaired, obs)
            if result.get("ok"):
                answer, unit = read_answer(result, c.spec)
                if answer is None:
                    yield from self._quit("empty after removing duplicates / converting units")
                    return
        if c.spec.type in ("number", "integer"):
            label = reading_label(sql, c.question)
            value = as_number(answer)
            lim = limits_for(label, unit) if label else None
            if lim is not None and value is not None and not lim.contains(value):
                yield from self._quit(f"implausible answer: {label} {value} {unit}")
                return
        yield self.submit(answer, unit)
