"""The SDK's Excel actions (read_excel_sheet, write_excel_sheet) on the key's uploaded .xlsx files, with openpyxl.

The web process only checks a call (`check`: its range, cells, values, sheet title, and the upload's unpacked
size from its zip directory) and hands the work to a worker (`answer`, on the control queue): a call covers at
most EXCEL_MAX_CELLS cells, a workbook unpacks to at most EXCEL_MAX_UNPACKED_BYTES, and reads stream the sheet
(read-only mode) only as far as the range's last row.

openpyxl (with numpy, where installed) takes up to half a second of CPU to import, so it is imported by the calls
that use it: a web or worker process that never touches a workbook does not pay for it at its start.
"""
import io
import re
import zipfile
from contextlib import contextmanager

from flask import current_app
from sqlalchemy import select, update

from ..extensions import db
from ..models import StoredFile

# workbook_url names an upload: its key (file_…), or any URL whose last path segment is the key.
FILE_KEY = re.compile(r"(file_[A-Za-z0-9_-]+)/?(?:[?#].*)?$")
# A worksheet's size in Excel (and in the file format): rows 1..1048576, columns A..XFD.
MAX_ROW, MAX_COLUMN = 1_048_576, 16_384
MAX_TITLE_CHARS = 31


class WorkbookError(Exception):
    """What the SDK shows as the action's error (a NaradaError with this message)."""


class WorkbookRefused(WorkbookError):
    """An argument the call cannot run with (a bad or too large range, sheet title or values): a 400."""


def _stored(api_key_id, workbook_url):
    match = FILE_KEY.search(str(workbook_url or ""))
    stored = None if match is None else db.session.execute(select(StoredFile).where(
        StoredFile.key == match[1], StoredFile.api_key_id == api_key_id)).scalar_one_or_none()
    if stored is None:
        raise WorkbookError(f"workbook_url '{workbook_url}' names no .xlsx file uploaded with this API key: upload "
                            "it first (POST /fast/v2/files, or the SDK's presigned upload) and pass its key "
                            "(file_…). Microsoft 365 workbooks are not reachable from this service.")
    return stored


def _parse_range(cell_range):
    """'Sheet1!A1:C3' or 'A1:C3' (the first sheet) → (sheet name or "", (min_col, min_row, max_col, max_row)),
    open ends None; a range outside the worksheet's size is refused."""
    sheet_name, _, cells = str(cell_range).rpartition("!")
    sheet_name = sheet_name.strip("'")
    from openpyxl.utils.cell import range_boundaries

    try:
        bounds = range_boundaries(cells.replace("$", ""))
    except (ValueError, TypeError):
        raise WorkbookRefused(f"range '{cell_range}' is not a cell range like 'Sheet1!A1:C3'.") from None
    for value, limit, what in zip(bounds, (MAX_COLUMN, MAX_ROW) * 2, ("column", "row") * 2):
        if value is not None and not 1 <= value <= limit:
            raise WorkbookRefused(f"range '{cell_range}' is outside a worksheet: {what}s go from 1 to {limit:,} "
                                  "(A1:XFD1048576).")
    return sheet_name, bounds


def _check_cells(cell_range, columns, rows):
    limit = current_app.config["EXCEL_MAX_CELLS"]
    if columns * rows > limit:
        raise WorkbookRefused(f"range '{cell_range}' covers {columns * rows:,} cells, over the {limit:,} cells one "
                              "call may read or write (EXCEL_MAX_CELLS): split it into smaller ranges.")


def _sheet(workbook, sheet_name):
    if sheet_name and sheet_name not in workbook.sheetnames:
        raise WorkbookError(f"The workbook has no sheet '{sheet_name}' (sheets: {', '.join(workbook.sheetnames)}).")
    return workbook[sheet_name] if sheet_name else workbook.worksheets[0]


def _text(value):
    return "" if value is None else str(value)


def _open(data, filename, read_only):
    """The workbook, if it unpacks to at most EXCEL_MAX_UNPACKED_BYTES (a 7 KB .xlsx can hold 200,000 cells)."""
    data = data or b""
    with _not_xlsx(filename):
        _check_unpacked(data, filename)
        from openpyxl import load_workbook

        return load_workbook(io.BytesIO(data), read_only=read_only)


@contextmanager
def _not_xlsx(filename):
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        yield
    except (InvalidFileException, zipfile.BadZipFile, KeyError, OSError, ValueError) as exc:
        raise WorkbookError(f"'{filename}' is not an .xlsx workbook ({exc}).") from None


def _check_unpacked(data, filename):
    """From the zip's directory alone (cheap): the sizes zipfile will read at most, per member."""
    limit = current_app.config["EXCEL_MAX_UNPACKED_BYTES"]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        unpacked = sum(member.file_size for member in archive.infolist())
    if unpacked > limit:
        raise WorkbookRefused(f"'{filename}' unpacks to {unpacked:,} bytes, over the {limit:,} a workbook "
                              "may unpack to here (EXCEL_MAX_UNPACKED_BYTES).")


def check(api_key_id, name, args):
    """The web process's part of a call, before it is handed to a worker: what needs no parsed workbook.
    Raises WorkbookRefused (a 400) or WorkbookError (the action's error)."""
    check_args(name, args)
    stored = _stored(api_key_id, args.get("workbook_url"))
    data, filename = stored.data, stored.filename
    db.session.rollback()
    check_data(data, filename)


def check_args(name, args):
    """The call's range, cells, values and new sheet title, before its upload is fetched."""
    cell_range = args.get("range")
    sheet_name, (min_col, min_row, max_col, max_row) = _parse_range(cell_range)
    if name == "write_excel_sheet":
        _check_values(args.get("values"), cell_range, min_col or 1, min_row or 1)
        if sheet_name:  # a sheet the workbook lacks is made: Excel's rules hold for every title it has
            _check_title(sheet_name)
    elif None not in (min_col, min_row, max_col, max_row):
        _check_cells(cell_range, max_col - min_col + 1, max_row - min_row + 1)


def check_data(data, filename):
    """The upload's unpacked size, from its zip directory alone; an empty upload is written as a new workbook."""
    if data:
        with _not_xlsx(filename):
            _check_unpacked(data, filename)


def answer(api_key_id, name, args):
    """The worker's part: the action's result as a window answers one (`refused`: the web's 400)."""
    try:
        data = (read if name == "read_excel_sheet" else write)(api_key_id, args)
    except WorkbookRefused as exc:
        return {"status": "error", "data": None, "error": str(exc), "refused": True}
    except WorkbookError as exc:
        return {"status": "error", "data": None, "error": str(exc)}
    return {"status": "success", "data": data, "error": None}


def read(api_key_id, args):
    """{"values": rows of strings} of the range; an open-ended range (A:C) stops at the sheet's last row."""
    _parse_range(args.get("range"))  # a bad range is refused before the upload is fetched
    stored = _stored(api_key_id, args.get("workbook_url"))
    data, filename = stored.data, stored.filename
    db.session.rollback()  # no transaction while the sheet is read
    return read_cells(data, filename, args.get("range"))


def read_cells(data, filename, cell_range):
    """The range's values (rows of strings) in an .xlsx file's bytes, streamed up to the range's last row."""
    sheet_name, (min_col, min_row, max_col, max_row) = _parse_range(cell_range)
    if None not in (min_col, min_row, max_col, max_row):  # before the workbook is opened
        _check_cells(cell_range, max_col - min_col + 1, max_row - min_row + 1)
    workbook = _open(data, filename, read_only=True)
    try:
        sheet = _sheet(workbook, sheet_name)
        min_col, min_row = min_col or 1, min_row or 1
        max_col = max_col or min(sheet.max_column or 1, MAX_COLUMN)
        max_row = max_row or min(sheet.max_row or 1, MAX_ROW)
        _check_cells(cell_range, max_col - min_col + 1, max_row - min_row + 1)
        # Streamed: the sheet is parsed up to the range's last row, not further.
        rows = sheet.iter_rows(min_row=min_row, max_row=max_row, min_col=min_col, max_col=max_col, values_only=True)
        values = [[_text(value) for value in row] for row in rows]
    finally:
        workbook.close()
    # Streaming stops at the sheet's last row: the range's rows past it are empty, as the whole sheet shows them.
    width = max_col - min_col + 1
    return {"values": values + [[""] * width for _ in range(max_row - min_row + 1 - len(values))]}


def _check_values(values, cell_range, min_col, min_row):
    if not isinstance(values, list) or not all(isinstance(row, list) for row in values):
        raise WorkbookRefused("values must be a list of rows (lists of strings).")
    width = max((len(row) for row in values), default=0)
    _check_cells(cell_range, width, len(values))
    last_row, last_col = min_row + len(values) - 1, min_col + width - 1
    if last_row > MAX_ROW or last_col > MAX_COLUMN:
        raise WorkbookRefused(f"values of {len(values):,} rows and {width:,} columns from '{cell_range}' would go past "
                              f"the worksheet's last row ({MAX_ROW:,}) or column (XFD, {MAX_COLUMN:,}).")
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            if value is not None and not isinstance(value, (str, int, float, bool)):
                raise WorkbookRefused(f"values[{r}][{c}] is {type(value).__name__}: a cell holds a string, a number, "
                                      "true/false or null.")


def _check_title(sheet_name):
    from openpyxl.workbook.child import INVALID_TITLE_REGEX

    if INVALID_TITLE_REGEX.search(sheet_name) or len(sheet_name) > MAX_TITLE_CHARS:
        raise WorkbookRefused(f"sheet title '{sheet_name}' cannot be a worksheet's: at most {MAX_TITLE_CHARS} "
                              "characters, none of \\ / ? * [ ] :.")


def write(api_key_id, args):
    """Write the rows from the range's top-left cell (a new sheet if it names one the workbook lacks)."""
    cell_range, values = args.get("range"), args.get("values")
    _check_values(values, cell_range, *_top_left(cell_range))  # refused before the upload is fetched
    stored = _stored(api_key_id, args.get("workbook_url"))
    key, data, filename = stored.key, stored.data, stored.filename
    db.session.rollback()  # no transaction while the workbook is rewritten
    data = write_cells(data, filename, cell_range, values)
    db.session.execute(update(StoredFile).where(StoredFile.key == key).values(data=data, size=len(data)))
    db.session.commit()
    return None


def _top_left(cell_range):
    _, (min_col, min_row, _, _) = _parse_range(cell_range)
    return min_col or 1, min_row or 1


def write_cells(data, filename, cell_range, values):
    """The .xlsx file's bytes with the rows written from the range's top-left cell."""
    sheet_name = _parse_range(cell_range)[0]
    min_col, min_row = _top_left(cell_range)
    _check_values(values, cell_range, min_col, min_row)
    from openpyxl import Workbook
    from openpyxl.utils.exceptions import IllegalCharacterError

    workbook = _open(data, filename, read_only=False) if data else Workbook()
    if sheet_name and sheet_name not in workbook.sheetnames:
        _check_title(sheet_name)
        workbook.create_sheet(sheet_name)
    sheet = _sheet(workbook, sheet_name)
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            try:
                sheet.cell(row=min_row + r, column=min_col + c, value=value)
            except (IllegalCharacterError, ValueError):  # a control character, a number Excel cannot hold
                raise WorkbookRefused(f"values[{r}][{c}] cannot be stored in a cell (control characters other than "
                                      "tab and newline cannot).") from None
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()
