"""The SQL tool: the guard refuses everything but one read-only query over the EHR, the executor runs it safely."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from sqlglot import exp

from pipeline.ehr.patch import Patch, RowEdit
from pipeline.ehr.schema import TABLES
from pipeline.gym.sqlexec import SQLExecutor
from pipeline.gym.sqlguard import SQLRefused, guard_sql

# ~10^10 rows of float maths: minutes of CPU on 2 threads, flat memory (streaming count)
SLOW_QUERY = ("SELECT COUNT(*) AS n FROM labevents a CROSS JOIN labevents b "
              "WHERE SQRT(a.valuenum * b.valuenum + 1) + LN(a.valuenum + b.valuenum + 2) > 1e9")
LAB_QUERY = ("SELECT l.labevent_id AS labevent_id, l.charttime AS charttime, d.label AS label, l.valuenum AS valuenum, "
             "l.valueuom AS unit FROM labevents AS l JOIN d_labitems AS d ON l.itemid = d.itemid "
             "WHERE l.subject_id = {subject} ORDER BY l.labevent_id")


def refusal(query: str) -> str:
    with pytest.raises(SQLRefused) as info:
        guard_sql(query, TABLES)
    assert isinstance(info.value, ValueError) and str(info.value) == info.value.reason
    return info.value.reason


# -- guard: refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "expected"), [
    ("CREATE TABLE x AS SELECT * FROM patients", "this statement is CREATE"),
    ("DROP TABLE patients", "this statement is DROP"),
    ("ALTER TABLE patients ADD COLUMN x INT", "this statement is ALTER"),
    ("TRUNCATE TABLE patients", "this statement is TRUNCATETABLE"),
    ("INSERT INTO patients (subject_id) VALUES (1)", "this statement is INSERT"),
    ("UPDATE patients SET gender = 'F' WHERE subject_id = 1", "this statement is UPDATE"),
    ("DELETE FROM patients WHERE subject_id = 1", "this statement is DELETE"),
    ("MERGE INTO patients USING admissions ON 1 = 1 WHEN MATCHED THEN DELETE", "this statement is MERGE"),
])
def test_ddl_and_dml_are_refused(query: str, expected: str) -> None:
    reason = refusal(query)
    assert "only read-only queries are allowed" in reason and expected in reason


@pytest.mark.parametrize(("query", "expected"), [
    ("PRAGMA table_info('patients')", "PRAGMA"),
    ("SET threads = 1", "SET"),
    ("ATTACH 'other.db' AS other", "ATTACH"),
    ("DETACH other", "DETACH"),
    ("COPY patients TO 'out.csv'", "COPY"),
    ("INSTALL httpfs", "INSTALL"),
    ("LOAD httpfs", "LOAD"),
    ("BEGIN TRANSACTION", "TRANSACTION"),
    ("COMMIT", "COMMIT"),
    ("USE other", "USE"),
    ("SHOW TABLES", "SHOW"),
    ("DESCRIBE patients", "DESCRIBE"),
    ("EXPLAIN SELECT 1", "EXPLAIN"),
    ("VALUES (1, 2)", "VALUES"),
])
def test_commands_and_settings_are_refused(query: str, expected: str) -> None:
    reason = refusal(query)
    assert f"this statement is {expected}" in reason


def test_select_into_is_refused() -> None:
    assert "INTO is not allowed" in refusal("SELECT * INTO copy_of_patients FROM patients")


@pytest.mark.parametrize("query", [
    "SELECT * FROM patients; DROP TABLE patients",
    "SELECT 1 AS a; SELECT 2 AS b",
    "SELECT * FROM patients;\nSELECT * FROM read_csv('/etc/passwd')",
])
def test_more_than_one_statement_is_refused(query: str) -> None:
    assert "only one statement per call" in refusal(query)


@pytest.mark.parametrize(("query", "expected"), [
    ("SELECT * FROM read_csv('/etc/passwd')", "table functions are not allowed in FROM/JOIN (READ_CSV('/etc/passwd'))"),
    ("SELECT * FROM read_csv_auto('x.csv')", "table functions are not allowed"),
    ("SELECT * FROM read_parquet('outputs/pairs/pairs.parquet')", "table functions are not allowed"),
    ("SELECT * FROM glob('*')", "table functions are not allowed"),
    ("SELECT * FROM range(1000000000)", "table functions are not allowed"),
    ("SELECT * FROM query_table('patients')", "table functions are not allowed"),
    ("SELECT * FROM patients p JOIN read_json('x.json') j ON TRUE", "table functions are not allowed"),
    ("SELECT * FROM patients, LATERAL read_csv('x')", "LATERAL is allowed only with a subquery"),
])
def test_table_functions_are_refused(query: str, expected: str) -> None:
    assert expected in refusal(query)


@pytest.mark.parametrize("query", [
    "SELECT * FROM 'outputs/pairs/pairs.parquet'",
    'SELECT * FROM "/etc/passwd"',
    "SELECT * FROM 'labevents.csv' AS l",
    "SELECT * FROM patients JOIN '../hub/data/test.parquet' USING (subject_id)",
])
def test_file_paths_as_tables_are_refused(query: str) -> None:
    assert "reading files is not allowed" in refusal(query)


@pytest.mark.parametrize(("query", "function"), [
    ("SELECT subject_id FROM patients WHERE subject_id IN (SELECT subject_id FROM read_parquet('p.parquet'))",
     None),
    ("WITH leak AS (SELECT * FROM read_parquet('outputs/pairs/pairs.parquet')) SELECT * FROM leak", None),
    ("SELECT (SELECT COUNT(*) FROM read_csv('/etc/passwd')) AS n", None),
    ("SELECT getenv('HOME') AS home", "getenv"),
    ("SELECT current_setting('threads') AS t", "current_setting"),
    ("SELECT query('SELECT 1') AS q", "query"),
    ("SELECT subject_id FROM patients WHERE gender = read_text('/etc/hostname')", "read_text"),
    ("SELECT * FROM patients WHERE EXISTS (SELECT 1 FROM glob('/*'))", None),
    ("SELECT system('ls') AS s", "system"),
    ("SELECT load_extension('x') AS s", "load_extension"),
])
def test_file_access_anywhere_in_the_tree_is_refused(query: str, function: str | None) -> None:
    reason = refusal(query)
    if function is None:
        assert "table functions are not allowed" in reason
    else:
        assert f"function {function}() is not allowed" in reason


def test_unknown_tables_are_refused_with_a_hint() -> None:
    reason = refusal("SELECT * FROM lab_results WHERE subject_id = 1")
    assert reason.startswith("unknown table 'lab_results'; known tables: admissions, caregiver")
    assert "unknown table 'vitals'" in refusal("SELECT * FROM patients p JOIN vitals v USING (subject_id)")
    assert "qualified table names" in refusal("SELECT * FROM main.patients")
    # a CTE name is only a table where the query defines it
    assert "unknown table 'recent'" in refusal("SELECT * FROM recent")


@pytest.mark.parametrize(("query", "expected"), [
    ("SELEC subject_id FROM patients", "the query does not parse: Invalid expression / Unexpected token at line 1"),
    ("SELECT * FROM patients WHERE", "the query does not parse:"),
    ("SELECT 'unterminated FROM patients", "the query does not parse:"),
    ("SELECT (1 + FROM patients", "the query does not parse:"),
    ("", "empty query"),
    ("  ;  ", "empty query"),
])
def test_parse_errors_are_short(query: str, expected: str) -> None:
    reason = refusal(query)
    assert reason.startswith(expected)
    assert "\x1b[" not in reason and "\n" not in reason and len(reason) < 300


def test_overlong_queries_are_refused() -> None:
    assert "query is too long" in refusal("SELECT 1 AS a " + " " * 30_000)


# -- guard: accepted queries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("query", [
    "SELECT subject_id, gender FROM patients WHERE subject_id = 10000001",
    "SELECT l.valuenum, d.label FROM labevents AS l JOIN d_labitems AS d ON l.itemid = d.itemid WHERE l.subject_id = 1",
    "SELECT p.subject_id, a.hadm_id FROM patients p LEFT JOIN admissions a USING (subject_id)",
    "WITH recent AS (SELECT * FROM labevents WHERE subject_id = 1) SELECT COUNT(*) AS n FROM recent",
    "WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT * FROM b",
    "SELECT subject_id, RANK() OVER (PARTITION BY subject_id ORDER BY charttime DESC NULLS LAST) AS rnk "
    "FROM labevents",
    "SELECT subject_id FROM patients UNION SELECT subject_id FROM admissions",
    "SELECT subject_id FROM patients INTERSECT SELECT subject_id FROM admissions",
    "SELECT subject_id FROM patients EXCEPT SELECT subject_id FROM admissions",
    "SELECT * FROM patients WHERE subject_id IN (SELECT subject_id FROM admissions WHERE hadm_id = 2)",
    "SELECT x.n FROM (SELECT COUNT(*) AS n FROM icustays) AS x",
    "SELECT * FROM PATIENTS p JOIN \"Admissions\" a ON p.subject_id = a.subject_id",
    "WITH Recent AS (SELECT * FROM labevents) SELECT * FROM recent",
    "SELECT * FROM (VALUES (1, 'a')) AS t(id, name)",
    "SELECT 1 AS one;",
    "-- the patient's labs\nSELECT * FROM labevents /* all of them */ WHERE subject_id = 1",
    "SELECT (EXTRACT(EPOCH FROM dischtime) - EXTRACT(EPOCH FROM admittime)) / 86400.0 AS days FROM admissions",
    "FROM patients",
])
def test_read_only_queries_pass(query: str) -> None:
    assert isinstance(guard_sql(query, TABLES), exp.Query)


def test_the_guard_checks_against_the_given_tables() -> None:
    assert guard_sql("SELECT * FROM Patients", ["patients"]) is not None
    with pytest.raises(SQLRefused, match="unknown table 'admissions'; known tables: patients"):
        guard_sql("SELECT * FROM admissions", ["patients"])


# -- executor ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executor(synthetic_ehr):
    with SQLExecutor(synthetic_ehr.root, timeout_s=1.5, row_cap=100, show_rows=5) as ex:
        yield ex


@pytest.fixture(scope="module")
def subject(synthetic_ehr) -> int:
    return int(synthetic_ehr.sql("SELECT MIN(subject_id) AS s FROM labevents")["s"][0])


def test_a_patient_query_returns_rows_and_a_table(executor: SQLExecutor, synthetic_ehr, subject: int) -> None:
    query = LAB_QUERY.format(subject=subject)
    expected = synthetic_ehr.sql(query)
    result = executor.execute(query)
    assert result.ok and not result.truncated
    assert result.columns == ["labevent_id", "charttime", "label", "valuenum", "unit"]
    assert result.row_count == expected.height == len(result.rows) > 0
    assert [r[0] for r in result.rows] == expected["labevent_id"].to_list()
    assert isinstance(result.rows[0][1], str)  # datetimes are JSON-ready ISO text
    lines = result.content.splitlines()
    assert lines[0].startswith(f"{expected.height:,} rows")
    assert lines[1] == "| labevent_id | charttime | label | valuenum | unit |"
    assert len(lines) == 3 + min(5, expected.height)
    assert 0 < result.seconds < 5


def test_a_patch_shows_in_the_result(executor: SQLExecutor, synthetic_ehr, subject: int) -> None:
    query = LAB_QUERY.format(subject=subject)
    clean = executor.execute(query)
    gone = clean.rows[0][0]
    patch = Patch((RowEdit("delete", "labevents", where={"labevent_id": gone}),
                   RowEdit("update", "labevents", where={"labevent_id": clean.rows[1][0]}, values={"valuenum": -1.0})))
    patched = executor.execute(query, patch.to_json())
    assert patched.ok and patched.row_count == clean.row_count - 1
    assert gone not in [r[0] for r in patched.rows]
    assert patched.rows[0][3] == -1.0
    again = executor.execute(query, "[]")  # the clean view is untouched by the cached patched one
    assert again.rows == clean.rows
    assert executor.execute(query, patch.to_json()).rows == patched.rows


def test_a_refused_query_never_reaches_the_worker(executor: SQLExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = executor.requests_sent

    def forbidden(*args: object) -> None:
        raise AssertionError("a refused query reached the worker")

    monkeypatch.setattr(executor, "_roundtrip", forbidden)
    for query in ("SELECT * FROM read_csv('/etc/passwd')", "DROP TABLE patients", "SELECT * FROM nowhere", "SELEC"):
        result = executor.execute(query)
        assert not result.ok and result.content.startswith("ERROR: query refused: ")
        assert result.rows == [] and result.row_count is None
    assert executor.requests_sent == sent


def test_the_plan_check_stops_file_scans_that_get_past_the_guard(executor: SQLExecutor, tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("token\nhunter2\n")
    result = executor._roundtrip(f"SELECT * FROM read_csv('{secret}')", "[]")  # bypasses the guard on purpose
    assert not result.ok and "reads a source outside the EHR tables" in result.content
    assert "hunter2" not in result.content and result.rows == []


def test_a_result_above_the_row_cap_is_truncated(executor: SQLExecutor) -> None:
    result = executor.execute("SELECT labevent_id, subject_id FROM labevents")
    assert result.ok and result.truncated and result.row_count is None
    assert len(result.rows) == 100
    assert result.content.startswith("more than 100 rows (showing the first 5)")
    exact = executor.execute("SELECT labevent_id FROM labevents ORDER BY labevent_id LIMIT 100")
    assert not exact.truncated and exact.row_count == 100


def test_polars_errors_come_back_as_error_results(executor: SQLExecutor) -> None:
    result = executor.execute("SELECT no_such_column FROM patients")
    assert not result.ok and result.content.startswith("ERROR: the query failed: ColumnNotFoundError")
    assert "no_such_column" in result.content and "Resolved plan" not in result.content
    result = executor.execute("SELECT CAST(gender AS DATE) AS d FROM patients")
    assert not result.ok and result.content.startswith("ERROR: the query failed:")
    assert executor.execute("SELECT COUNT(*) AS n FROM patients").ok  # the worker survived


def test_bad_arguments_never_raise(executor: SQLExecutor) -> None:
    assert "empty query" in executor.execute(None).content  # type: ignore[arg-type]
    assert "patch could not be applied" in executor.execute("SELECT 1 AS a", "[{not json").content
    assert "patch could not be applied" in executor.execute("SELECT 1 AS a", '[{"op": "delete", "table": "x"}]').content
    assert "patch_json must be a JSON string" in executor.execute("SELECT 1 AS a", 3).content  # type: ignore[arg-type]
    assert executor.execute("SELECT 1 AS a").rows == [[1]]


def test_a_long_query_times_out_and_the_next_one_works(executor: SQLExecutor) -> None:
    started = executor.workers_started
    result = executor.execute(SLOW_QUERY)
    assert not result.ok and result.content.startswith("ERROR: query timed out after 1.5 s")
    assert result.seconds < 10
    assert executor.workers_started == started + 1
    follow_up = executor.execute("SELECT COUNT(*) AS n FROM patients")
    assert follow_up.ok and follow_up.rows == [[1000]]


def test_a_dead_worker_is_reported_and_replaced(executor: SQLExecutor) -> None:
    assert executor.execute("SELECT 1 AS a").ok
    pid = executor._proc.pid  # type: ignore[union-attr]
    killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
    killer.start()
    result = executor.execute(SLOW_QUERY)
    killer.join()
    assert not result.ok and "the SQL worker died" in result.content and "SIGKILL" in result.content
    assert executor.execute("SELECT COUNT(*) AS n FROM admissions").ok
    # a worker that died while idle is replaced silently
    os.kill(executor._proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
    executor._proc.wait()  # type: ignore[union-attr]
    assert executor.execute("SELECT 1 AS a").ok


def test_a_closed_executor_answers_with_an_error(synthetic_ehr) -> None:
    ex = SQLExecutor(synthetic_ehr.root)
    assert ex.execute("SELECT 1 AS a").ok
    proc = ex._proc
    ex.close()
    assert proc is not None and proc.poll() is not None
    assert ex.execute("SELECT 1 AS a").content == "ERROR: the SQL tool is closed"
    ex.close()  # idempotent
