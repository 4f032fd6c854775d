"""The SDK's Excel actions (read_excel_sheet, write_excel_sheet) on the key's uploaded .xlsx files, with openpyxl."""
import io
import re

from openpyxl import Workbook, load_workbook
from openpyxl.utils.cell import range_boundaries
from openpyxl.utils.exceptions import InvalidFileException
from sqlalchemy import select, update

from ..extensions import db
from ..models import StoredFile

# workbook_url names an upload: its key (file_…), or any URL whose last path segment is the key.
FILE_KEY = re.compile(r"(file_[A-Za-z0-9_-]+)/?(?:[?#].*)?$")


class WorkbookError(Exception):
    """What the SDK shows as the action's error (a NaradaError with this message)."""


def _stored(api_key_id, workbook_url):
    match = FILE_KEY.search(str(workbook_url or ""))
    stored = None if match is None else db.session.execute(select(StoredFile).where(
        StoredFile.key == match[1], StoredFile.api_key_id == api_key_id)).scalar_one_or_none()
    if stored is None:
        raise WorkbookError(f"workbook_url '{workbook_url}' names no .xlsx file uploaded with this API key: upload "
                            "it first (POST /fast/v2/files, or the SDK's presigned upload) and pass its key "
                            "(file_…). Microsoft 365 workbooks are not reachable from this service.")
    return stored


def _sheet_and_cells(workbook, cell_range):
    """'Sheet1!A1:C3' or 'A1:C3' (the first sheet) → (worksheet, (min_col, min_row, max_col, max_row))."""
    sheet_name, _, cells = str(cell_range).rpartition("!")
    sheet_name = sheet_name.strip("'")
    if sheet_name and sheet_name not in workbook.sheetnames:
        raise WorkbookError(f"The workbook has no sheet '{sheet_name}' (sheets: {', '.join(workbook.sheetnames)}).")
    try:
        bounds = range_boundaries(cells.replace("$", ""))
    except ValueError:
        raise WorkbookError(f"range '{cell_range}' is not a cell range like 'Sheet1!A1:C3'.") from None
    return (workbook[sheet_name] if sheet_name else workbook.worksheets[0]), bounds


def _text(value):
    return "" if value is None else str(value)


def _open(stored):
    try:
        return load_workbook(io.BytesIO(stored.data or b""))
    except (InvalidFileException, KeyError, OSError, ValueError) as exc:
        raise WorkbookError(f"'{stored.filename}' is not an .xlsx workbook ({exc}).") from None


def read(api_key_id, args):
    """{"values": rows of strings} of the range; an open-ended range (A:C) stops at the sheet's last row."""
    stored = _stored(api_key_id, args.get("workbook_url"))
    sheet, (min_col, min_row, max_col, max_row) = _sheet_and_cells(_open(stored), args.get("range"))
    db.session.rollback()
    rows = sheet.iter_rows(min_row=min_row or 1, max_row=max_row or sheet.max_row,
                           min_col=min_col or 1, max_col=max_col or sheet.max_column, values_only=True)
    return {"values": [[_text(value) for value in row] for row in rows]}


def write(api_key_id, args):
    """Write the rows from the range's top-left cell (a new sheet if it names one the workbook lacks)."""
    values = args.get("values")
    if not isinstance(values, list) or not all(isinstance(row, list) for row in values):
        raise WorkbookError("values must be a list of rows (lists of strings).")
    stored = _stored(api_key_id, args.get("workbook_url"))
    workbook = _open(stored) if stored.data else Workbook()
    sheet_name = str(args.get("range")).rpartition("!")[0].strip("'")
    if sheet_name and sheet_name not in workbook.sheetnames:
        workbook.create_sheet(sheet_name)
    sheet, (min_col, min_row, _, _) = _sheet_and_cells(workbook, args.get("range"))
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            sheet.cell(row=(min_row or 1) + r, column=(min_col or 1) + c, value=value)
    out = io.BytesIO()
    workbook.save(out)
    data = out.getvalue()
    db.session.execute(update(StoredFile).where(StoredFile.key == stored.key).values(data=data, size=len(data)))
    db.session.commit()
    return None
