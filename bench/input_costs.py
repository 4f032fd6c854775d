"""Benchmark: the web process's CPU for the issue-43 inputs, the code before the bounds against after, in one run:
an `allOf` schema of 80 KB and 400 KB at submit, and Excel reads and a write of a 200,000-cell workbook (refused:
over EXCEL_MAX_UNPACKED_BYTES) and of a 100,000-cell one (A1:A1, the widest allowed range, the last rows); then
the web CPU of an allowed Excel call in the web process against its checks alone (a worker does the work).
Run: `.venv/bin/python -m bench.input_costs`."""
import io
import time

import jsonschema
from flask import Flask
from openpyxl import Workbook, load_workbook
from openpyxl.utils.cell import range_boundaries

from app import json_schemas, schema_cost
from app.windows import workbooks
from config.settings import load

RUNS = 3


def cpu(call, runs=RUNS):
    """The least process CPU seconds of `runs` calls (what the call costs, least disturbed by the machine)."""
    best = None
    for _ in range(runs):
        started = time.process_time()
        try:
            call()
        except Exception:  # a refusal is the outcome measured here
            pass
        spent = time.process_time() - started
        best = spent if best is None else min(best, spent)
    return best


def check_before(schema):
    """json_schemas.check as it was: its walks, then the 2020-12 metaschema's, then the cost measure."""
    if json_schemas.problems(schema):
        return
    jsonschema.validators.validator_for(schema).check_schema(schema, format_checker=json_schemas.FORMAT_CHECKER)
    schema_cost.problems(schema)


def read_before(data, cell_range):
    """workbooks.read as it was: the whole workbook parsed, then the range."""
    sheet = load_workbook(io.BytesIO(data)).worksheets[0]
    min_col, min_row, max_col, max_row = range_boundaries(cell_range)
    return [[value for value in row] for row in sheet.iter_rows(
        min_row=min_row, max_row=max_row, min_col=min_col, max_col=max_col, values_only=True)]


def write_before(data, cell_range, values):
    """workbooks.write as it was: the whole workbook loaded, the cells set, saved."""
    book = load_workbook(io.BytesIO(data))
    min_col, min_row, _, _ = range_boundaries(cell_range)
    for r, values_row in enumerate(values):
        for c, value in enumerate(values_row):
            book.worksheets[0].cell(row=min_row + r, column=min_col + c, value=value)
    book.save(io.BytesIO())


def big_workbook(cells=200_000, columns=10):
    book = Workbook()
    sheet = book.active
    for _ in range(cells // columns):
        sheet.append([1] * columns)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def row(what, before, after):
    ratio = before / after if after else float("inf")
    print(f"{what:<52} before {before * 1000:10.1f} ms   after {after * 1000:8.1f} ms   before/after {ratio:8.1f}")


def main():
    app = Flask(__name__)
    app.config.update(load())
    for size in (80_000, 400_000):
        schema = {"allOf": [{}] * (size // 4)}
        row(f"schema allOf of {size // 1000} KB: web CPU at submit", cpu(lambda: check_before(schema), 1),
            cpu(lambda: json_schemas.check(schema)))
    with app.app_context():
        for cells in (200_000, 100_000):
            data = big_workbook(cells)
            print(f"workbook: {cells:,} cells, {len(data):,} bytes .xlsx (EXCEL_MAX_UNPACKED_BYTES "
                  f"{app.config['EXCEL_MAX_UNPACKED_BYTES']:,})")
            rows = cells // 10
            for cell_range in ("A1:A1", f"A1:J{app.config['EXCEL_MAX_CELLS'] // 10}", f"A{rows - 1}:A{rows}"):
                row(f"Excel read {cell_range}: web CPU", cpu(lambda: read_before(data, cell_range), 1),
                    cpu(lambda: workbooks.read_cells(data, "big.xlsx", cell_range)))
            row("Excel write A1 (one cell): web CPU", cpu(lambda: write_before(data, "A1", [["x"]]), 1),
                cpu(lambda: workbooks.write_cells(data, "big.xlsx", "A1", [["x"]]), 1))
        # Since the work moved to a worker: the web process's share of an allowed call, the bounded work it
        # did itself (before) against the checks it still does (after); the worker does what the first did.
        data = big_workbook(100_000)
        calls = [("read_excel_sheet", {"range": cell_range}) for cell_range in (
            f"A1:J{app.config['EXCEL_MAX_CELLS'] // 10}", "A9999:A10000")]
        for name, args in calls + [("write_excel_sheet", {"range": "A1", "values": [["x"]]})]:
            work = (lambda: workbooks.read_cells(data, "big.xlsx", args["range"])) if name.startswith("read") else (
                lambda: workbooks.write_cells(data, "big.xlsx", args["range"], args["values"]))
            row(f"{name.split('_')[0]} {args['range']} (100,000 cells), worker's now: web CPU", cpu(work),
                cpu(lambda: (workbooks.check_args(name, args), workbooks.check_data(data, "big.xlsx"))))

if __name__ == "__main__":
    main()
