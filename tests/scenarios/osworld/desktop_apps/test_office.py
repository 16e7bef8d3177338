"""Official LibreOffice tasks (calc, writer, impress) on a local desktop with the real application: the
task's own setup (its downloads replaced by files generated here, opened in LibreOffice as OSWorld opens
them), scored by OSWorld's evaluators (compare_table, the docx and pptx metrics) after its postconfig
(the window activated, Ctrl+S): 0 untouched, 1 after the scripted solution, made in the running
LibreOffice through its own API (uno_edit.py) and saved in the file's format."""

import datetime
import io

import pytest

from tests.scenarios.osworld.desktop_apps.official import play, require_apps, task, uno_edit

TODAY = datetime.date.today()


def _xlsx(rows, time_cells=()) -> bytes:
    import openpyxl
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    for cell in time_cells:
        book.active[cell].number_format = "[h]:mm"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _docx(paragraphs, font=None, page_breaks=0) -> bytes:
    import docx
    document = docx.Document()
    for text in paragraphs:
        run = document.add_paragraph().add_run(text)
        if font:
            run.font.name = font
    for _ in range(page_breaks):
        document.add_paragraph().add_run().add_break(docx.enum.text.WD_BREAK.PAGE)
    document.add_paragraph("The end.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _pptx(titles) -> bytes:
    import pptx
    deck = pptx.Presentation()   # 10 x 7.5 in: landscape
    for title in titles:
        deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = title
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _age(born: datetime.date) -> int:
    return TODAY.year - born.year - ((TODAY.month, TODAY.day) < (born.month, born.day))


BIRTHDAYS = [("Ann", datetime.date(1990, 3, 14)), ("Bo", datetime.date(1985, 12, 31)),
             ("Cy", datetime.date(2000, 1, 1)), ("Di", datetime.date(1977, 7, 7))]
AMOUNTS = [("Rent", 1200), ("Food", 310), ("Gym", 45), ("Books", 87), ("Travel", 640)]
WORDS = ["Dublin Zoo is one of the oldest zoos in the world.", "It opened in 1831 in Phoenix Park.",
         "It keeps about 400 animals."]

CELL = "doc.Sheets.getByIndex(0).getCellRangeByName"
SORT_BY_AMOUNT = ("r = doc.Sheets.getByIndex(0).getCellRangeByName('A2:B6'); "
                  "r.setDataArray(tuple(sorted(r.getDataArray(), key=lambda row: row[1])))")
AGES = "; ".join(f"{CELL}('C{i + 2}').setValue({_age(born)})" for i, (_, born) in enumerate(BIRTHDAYS))
ALL_TEXT = "c = doc.Text.createTextCursor(); c.gotoStart(False); c.gotoEnd(True); "
PAGE_BREAK = ("from com.sun.star.text.ControlCharacter import PARAGRAPH_BREAK; c = doc.Text.createTextCursor(); "
              "c.gotoEnd(False); doc.Text.insertControlCharacter(c, PARAGRAPH_BREAK, False); "
              "c.BreakType = uno.Enum('com.sun.star.style.BreakType', 'PAGE_BEFORE')")
AUTOSAVE = ("from com.sun.star.beans import PropertyValue; p = ctx.ServiceManager.createInstanceWithContext("
            "'com.sun.star.configuration.ConfigurationProvider', ctx); a = PropertyValue(); a.Name = 'nodepath'; "
            "a.Value = '/org.openoffice.Office.Common/Save/Document'; u = p.createInstanceWithArguments("
            "'com.sun.star.configuration.ConfigurationUpdateAccess', (a,)); u.AutoSave = True; "
            "u.AutoSaveTimeIntervall = 3; u.commitChanges(); p.flush()")
PORTRAIT = "p = doc.DrawPages.getByIndex(0); p.Width, p.Height = p.Height, p.Width"
DISSOLVE = "doc.DrawPages.getByIndex(0).Effect = uno.Enum('com.sun.star.presentation.FadeEffect', 'DISSOLVE')"

# (domain, id prefix, the window setup opens, files in place of the downloads, file the solution edits, code)
CASES = {
    "calc-multiply-time": (
        "libreoffice_calc", "357ef137", "Multiply_Time_Number.xlsx - LibreOffice Calc",
        {"Multiply_Time_Number.xlsx": _xlsx([["Week", None, "Total hours", "Hourly rate", "Total earned"], [],
                                             ["W1", None, datetime.timedelta(hours=7, minutes=40), 25]], ["C3"])},
        "/home/user/Multiply_Time_Number.xlsx", f"{CELL}('E3').Formula = '=C3*24*D3'"),
    "calc-ages": (
        "libreoffice_calc", "4e6fcf72", "Employee_Age_By_Birthday.xlsx - LibreOffice Calc",
        {"Employee_Age_By_Birthday.xlsx": _xlsx([["Name", "Birthday", "Age"], *[[n, b] for n, b in BIRTHDAYS]]),
         "Employee_Age_By_Birthday_gold.xlsx": _xlsx([["Name", "Birthday", "Age"],
                                                      *[[n, b, _age(b)] for n, b in BIRTHDAYS]])},
        "/home/user/Employee_Age_By_Birthday.xlsx", AGES),
    "calc-sort": (
        "libreoffice_calc", "51b11269", "Arrang_Value_min_to_max.xlsx - LibreOffice Calc",
        {"Arrang_Value_min_to_max.xlsx": _xlsx([["Item", "Amount"], *AMOUNTS]),
         "Arrang_Value_min_to_max_gold.xlsx": _xlsx([["Item", "Amount"], *sorted(AMOUNTS, key=lambda r: r[1])])},
        "/home/user/Arrang_Value_min_to_max.xlsx", SORT_BY_AMOUNT),
    "writer-font": (
        "libreoffice_writer", "0e763496", "Dublin_Zoo_Intro.docx - LibreOffice Writer",
        {"Dublin_Zoo_Intro.docx": _docx(WORDS, font="Arial")},
        "/home/user/Desktop/Dublin_Zoo_Intro.docx", ALL_TEXT + "c.CharFontName = 'Times New Roman'"),
    "writer-center": (
        "libreoffice_writer", "3ef2b351", "Constitution_Template_With_Guidelines.docx - LibreOffice Writer",
        {"Constitution_Template_With_Guidelines.docx": _docx(["Constitution", *WORDS])},
        "/home/user/Desktop/Constitution_Template_With_Guidelines.docx",
        "doc.Text.createEnumeration().nextElement().ParaAdjust = "
        "uno.Enum('com.sun.star.style.ParagraphAdjust', 'CENTER')"),
    "writer-page-break": (
        "libreoffice_writer", "ecc2413d", "Sample_Statutory_Declaration.docx - LibreOffice Writer",
        {"Sample_Statutory_Declaration.docx": _docx(WORDS, page_breaks=4)},
        "/home/user/Desktop/Sample_Statutory_Declaration.docx", PAGE_BREAK),
    "impress-portrait": (
        "libreoffice_impress", "ce88f674", "AM_Last_Page_Template.pptx - LibreOffice Impress",
        {"AM_Last_Page_Template.pptx": _pptx(["Thank you", "Questions"])},
        "/home/user/Desktop/AM_Last_Page_Template.pptx", PORTRAIT),
    "impress-dissolve": (
        "libreoffice_impress", "21760ecb", "Ch4 Video Effect.pptx - LibreOffice Impress",
        {"Ch4 Video Effect.pptx": _pptx(["Video effects", "Transitions", "Summary"])},
        "/home/user/Desktop/Ch4 Video Effect.pptx", DISSOLVE),
    "impress-autosave": ("libreoffice_impress", "2cd43775", "LibreOffice Impress", {}, "-", AUTOSAVE),
}


@pytest.fixture(scope="module")
def office_desktop(desktop_root):
    require_apps("soffice")
    from rlanything_jax.scenarios.osworld.local_desktop import DesktopOptions, LocalDesktop
    with LocalDesktop(DesktopOptions(runtime_root=desktop_root), start=False) as session:
        yield session


@pytest.mark.slow
@pytest.mark.parametrize("solved", [False, True], ids=["untouched", "solved"])
@pytest.mark.parametrize("case", list(CASES))
def test_libreoffice_task(office_desktop, tmp_path, case, solved):
    domain, id_prefix, window, files, path, code = CASES[case]
    outcome = play(office_desktop, task(domain, id_prefix), tmp_path, window, files,
                   solve=(lambda client: uno_edit(client, path, code)) if solved else None)
    assert outcome.score == float(solved), outcome.detail
