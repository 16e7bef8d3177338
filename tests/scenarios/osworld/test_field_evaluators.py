"""Scoring as OSWorld scores: an evaluator run through this project's `evaluate` (getters, the cache directory,
options, and/or) gives exactly what OSWorld's own metric functions (the desktop-env package) give when called
directly on the same files, for generated file pairs that are equal, slightly different, or wrong: office
formats (xlsx, pptx, docx, odt), images, PDFs and config files. Equal pairs score 1 and wrong ones 0.
And where this project has a metric of its own, it agrees with OSWorld's on the same values."""

import io
import json

import pytest

from rlanything_jax.scenarios.osworld import metrics as own_metrics
from rlanything_jax.scenarios.osworld.client import OsWorldClient
from rlanything_jax.scenarios.osworld.evaluator import evaluate, getter_function
from rlanything_jax.scenarios.osworld.field_evaluators import UNAVAILABLE, FieldEnv
from rlanything_jax.scenarios.osworld.setup_steps import SetupContext

# ---------------------------------------------------------------- generated files: (gold, variants)


def _xlsx(rows):
    import openpyxl

    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _pptx(title, body, bold=False):
    from pptx import Presentation

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = title
    slide.placeholders[1].text = body
    slide.shapes.title.text_frame.paragraphs[0].runs[0].font.bold = bold
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _docx(paragraphs):
    from docx import Document

    document = Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _odt(paragraphs):
    from odf.opendocument import OpenDocumentText
    from odf.text import P

    document = OpenDocumentText()
    for text in paragraphs:
        document.text.addElement(P(text=text))
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()


def _png(shift=0, noise=False):
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:64, 0:96]
    pixels = np.stack([(x * 2 + shift) % 256, (y * 3) % 256, ((x + y) * 2) % 256], axis=-1).astype(np.uint8)
    if noise:
        pixels[10:12, 10:12] = 255 - pixels[10:12, 10:12]
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def _pdf(lines):
    import fitz

    document = fitz.open()
    page = document.new_page()
    for index, text in enumerate(lines):
        page.insert_text((72, 72 + 20 * index), text)
    return document.tobytes()


GRADED = ("compare_pdfs",)
ROWS = [["Name", "Score"], ["Ann", 3], ["Bob", 5]]
TEXT = ["The quick brown fox.", "Jumps over the lazy dog."]
VLCRC = "[qt]\n# comment\nqt-bgcone=0\nqt-privacy-ask=0\n"
TABLE_RULES = {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]}


def _file_pairs():
    """(func, extension, gold bytes, {variant: result bytes}, options); built when the libraries are there."""
    return [
        ("compare_table", "xlsx", _xlsx(ROWS), {"equal": _xlsx(ROWS), "slight": _xlsx(ROWS[:2] + [["Bob", 6]]),
                                                "wrong": _xlsx([["Other"], [1]])},
         TABLE_RULES),
        ("compare_pptx_files", "pptx", _pptx("Title", "Body"),
         {"equal": _pptx("Title", "Body"), "slight": _pptx("Title", "Body", bold=True), "wrong": _pptx("Other", "x")},
         {}),
        ("compare_docx_files", "docx", _docx(TEXT),
         {"equal": _docx(TEXT), "slight": _docx([TEXT[0], TEXT[1].replace("lazy", "lazy,")]),
          "wrong": _docx(["No."])},
         {}),
        ("compare_docx_files", "odt", _odt(TEXT),
         {"equal": _odt(TEXT), "slight": _odt([TEXT[0], TEXT[1].replace("lazy", "lazy,")]), "wrong": _odt(["No."])},
         {}),
        ("compare_image_list", "png", _png(), {"equal": _png(), "slight": _png(noise=True), "wrong": _png(shift=90)},
         {}),
        ("check_structure_sim", "png", _png(), {"equal": _png(), "slight": _png(noise=True), "wrong": _png(shift=90)},
         {}),
        ("compare_pdfs", "pdf", _pdf(TEXT), {"equal": _pdf(TEXT), "slight": _pdf([TEXT[0], TEXT[1] + "!"]),
                                             "wrong": _pdf(["Something else entirely."])}, {}),
    ]


def _context(tmp_path, files):
    # OSWorld's getters read the client's endpoint; these evaluators never call it (files are in the cache).
    client = OsWorldClient("127.0.0.1:9", retries=1)
    context = SetupContext(client=client, task_id="task", cache_root=str(tmp_path / "cache"))
    context.cache_dir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (context.cache_dir / name).write_bytes(data)
    return context


PAIR_IDS = ["compare_table-xlsx", "compare_pptx_files-pptx", "compare_docx_files-docx", "compare_docx_files-odt",
            "compare_image_list-png", "check_structure_sim-png", "compare_pdfs-pdf"]


@pytest.mark.parametrize("index", range(len(PAIR_IDS)), ids=PAIR_IDS)
def test_file_metrics_score_as_osworlds_functions(field, tmp_path, index):
    func, ext, gold, variants, options = _file_pairs()[index]
    assert f"{func}-{ext}" == PAIR_IDS[index]
    scores = {}
    for variant, data in variants.items():
        context = _context(tmp_path / variant, {f"result.{ext}": data, f"gold.{ext}": gold})
        # The gold file as OSWorld's cloud_file getter finds it in the task's cache (no download), the result
        # as a file the task ships (this project's cache_file getter).
        evaluator = {"func": func, "result": {"type": "cache_file", "path": f"result.{ext}"},
                     "expected": {"type": "cloud_file", "path": f"https://example.invalid/gold.{ext}",
                                  "dest": f"gold.{ext}"}, "options": options}
        ours = evaluate(evaluator, context, "DONE").score
        theirs = float(field.metrics[func](str(context.cache_dir / f"result.{ext}"),
                                           str(context.cache_dir / f"gold.{ext}"), **options))
        assert ours == theirs, (variant, ours, theirs)
        scores[variant] = ours
    # compare_pdfs grades the texts' similarity; the others are pass/fail.
    wrong_ok = scores["wrong"] < 0.5 if func in GRADED else scores["wrong"] == 0.0
    assert scores["equal"] == 1.0 and wrong_ok, scores


def test_config_file_metrics_score_as_osworlds_functions(field, tmp_path):
    settings = {"editor.fontSize": 14, "files.autoSave": "afterDelay"}
    cases = [("check_json_settings", json.dumps(settings), {"expected": settings}, 1.0),
             ("check_json_settings", json.dumps({**settings, "editor.fontSize": 15}), {"expected": settings}, 0.0),
             ("check_qt_bgcone", VLCRC, {"expected_qt_bgcone": 0}, 1.0),
             ("check_qt_bgcone", VLCRC.replace("qt-bgcone=0", "qt-bgcone=1"), {"expected_qt_bgcone": 0}, 0.0),
             ("check_qt_bgcone", VLCRC.replace("qt-bgcone=0", "#qt-bgcone=0"), {"expected_qt_bgcone": 0}, None)]
    for index, (func, text, rule, truth) in enumerate(cases):
        context = _context(tmp_path / str(index), {"config": text.encode()})
        evaluator = {"func": func, "result": {"type": "cache_file", "path": "config"},
                     "expected": {"type": "rule", "rules": rule}}
        ours = evaluate(evaluator, context, "DONE").score
        theirs = float(field.metrics[func](str(context.cache_dir / "config"), rule))
        assert ours == theirs and (truth is None or ours == truth), (func, text, ours, theirs)


def test_a_missing_result_file_scores_zero_and_a_final_fail_scores_zero(field, tmp_path):
    context = _context(tmp_path, {"gold.xlsx": _xlsx(ROWS), "result.xlsx": _xlsx(ROWS)})
    evaluator = {"func": "compare_table", "result": {"type": "cache_file", "path": "absent.xlsx"},
                 "expected": {"type": "cloud_file", "path": "https://example.invalid/g", "dest": "gold.xlsx"},
                 "options": TABLE_RULES}
    assert evaluate(evaluator, context, "DONE").score == 0.0
    evaluator["result"]["path"] = "result.xlsx"
    assert evaluate(evaluator, context, "DONE").score == 1.0
    assert evaluate(evaluator, context, "FAIL").score == 0.0


TIMEDATECTL = ("               Local time: Thu 2024-01-25 12:56:06 WET\n"
               "           Universal time: Thu 2024-01-25 12:56:06 UTC\n"
               "                 RTC time: Thu 2024-01-25 12:56:05\n"
               "                Time zone: {zone}\n"
               "System clock synchronized: yes\n")
OWN_CASES = [
    ("exact_match", ("a\n", {"expected": "a\n"})), ("exact_match", ("a", {"expected": "a\n"})),
    ("match_in_list", ("b", {"expected": ["a", "b"]})), ("is_in_list", (["a", "b"], {"expected": "c"})),
    ("check_include_exclude", ("x ok y", {"include": ["ok"], "exclude": ["bad"]})),
    ("check_include_exclude", ("x ok bad", {"include": ["ok"], "exclude": ["bad"]})),
    ("check_gnome_favorite_apps", ("['a.desktop', 'b.desktop']\n", {"expected": ["b.desktop", "a.desktop"]})),
    ("check_gnome_favorite_apps", ("['a.desktop']\n", {"expected": ["b.desktop"]})),
    ("check_text_enlarged", ("1.5\n",)), ("check_text_enlarged", ("1.0\n",)),
    ("is_utc_0", (TIMEDATECTL.format(zone="Etc/UTC (UTC, +0000)"),)),
    ("is_utc_0", (TIMEDATECTL.format(zone="Asia/Tokyo (JST, +0900)"),)),
    ("check_moved_jpgs", ({"type": "directory", "name": "d", "children": [{"type": "file", "name": "a.jpg"}]},
                          {"expected": ["a.jpg"]})),
    ("literal_match", ("abc", "abc")), ("literal_match", ("abc", "abd")),
]


@pytest.mark.parametrize("name,args", OWN_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(OWN_CASES)])
def test_this_projects_own_metrics_agree_with_osworlds(field, name, args):
    assert float(own_metrics.METRICS[name](*args)) == float(field.metrics[name](*args))


def test_every_metric_osworld_offers_but_the_ocr_one_is_available(field):
    assert set(UNAVAILABLE) == {"compare_image_text"} and "compare_image_text" not in field.metrics
    assert {"compare_table", "compare_pptx_files", "compare_docx_files", "check_json_settings"} <= set(field.metrics)
    assert {"cloud_file", "vlc_config", "gimp_config_file", "vscode_config"} <= set(field.getters)


def test_osworlds_getters_read_a_real_desktop_through_the_adapter(field, desktop, tmp_path):
    # vlc_config runs `python -c` on the desktop for the path, then fetches the file: the adapter's controller.
    context = SetupContext(desktop.client, "vlc-task", str(tmp_path / "cache"))
    evaluator = {"func": "check_qt_bgcone", "result": {"type": "vlc_config", "dest": "vlcrc"},
                 "expected": {"type": "rule", "rules": {"expected_qt_bgcone": 0}}}
    desktop.client.execute(["mkdir", "-p", "/home/user/.config/vlc"])
    for text, truth in ((VLCRC, 1.0), (VLCRC.replace("qt-bgcone=0", "qt-bgcone=1"), 0.0)):
        assert desktop.client.upload_file("/home/user/.config/vlc/vlcrc", text.encode())
        assert evaluate(evaluator, context, "DONE").score == truth
    listing = getter_function("list_directory")(context, {"path": "/home/user/.config"})
    assert "vlc" in [child["name"] for child in listing["children"]]
    size = field.getters["vm_screen_size"](FieldEnv.over(desktop.client, str(context.cache_dir)), {})
    assert size == {"width": 1920, "height": 1080}
