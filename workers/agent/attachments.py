"""Reading attached files as text for the agent: plain text, CSV, JSON and PDF (pypdf)."""
import csv
import io
import json

MAX_PDF_PAGES = 200


class Unreadable(ValueError):
    """The file's type cannot be read as text; the message says what can."""


def kind_of(filename, content_type, data):
    name = (filename or "").lower()
    content_type = (content_type or "").split(";")[0].strip().lower()
    if content_type == "application/pdf" or name.endswith(".pdf") or data[:5] == b"%PDF-":
        return "pdf"
    if content_type in ("text/csv", "application/csv") or name.endswith(".csv"):
        return "csv"
    if content_type == "application/json" or content_type.endswith("+json") or name.endswith(".json"):
        return "json"
    return "text"


def read_text(filename, content_type, data):
    """The file's content as text for the planner; Unreadable when it is not text, CSV, JSON or PDF."""
    kind = kind_of(filename, content_type, data)
    if kind == "pdf":
        return _pdf(filename, data)
    text = _decode(filename, content_type, data)
    if kind == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        header = rows[0] if rows else []
        return (f"{filename}: CSV, {max(len(rows) - 1, 0)} rows; columns: {', '.join(header)}\n" + text)
    if kind == "json":
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise Unreadable(f"{filename} is not valid JSON: {exc}.") from None
        return f"{filename}: JSON\n" + json.dumps(value, ensure_ascii=False, indent=2)
    return f"{filename}:\n{text}"


def _decode(filename, content_type, data):
    for encoding in ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if "\x00" not in text:
            return text
    raise Unreadable(f"{filename} ({content_type or 'binary'}, {len(data)} bytes) cannot be read: only "
                     "plain text, CSV, JSON and PDF attachments can be read.")


def _pdf(filename, data):
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise Unreadable(f"{filename} is an encrypted PDF; it cannot be read.")
        pages = [page.extract_text() or "" for page in reader.pages[:MAX_PDF_PAGES]]
    except Unreadable:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise Unreadable(f"{filename} could not be read as a PDF: {exc}.") from None
    text = "\n\n".join(f"[page {i + 1}]\n{page.strip()}" for i, page in enumerate(pages))
    more = f" (first {MAX_PDF_PAGES} pages)" if len(reader.pages) > MAX_PDF_PAGES else ""
    if not any(page.strip() for page in pages):
        return f"{filename}: PDF, {len(reader.pages)} pages, no extractable text (scanned images?)."
    return f"{filename}: PDF, {len(reader.pages)} pages{more}\n{text}"
