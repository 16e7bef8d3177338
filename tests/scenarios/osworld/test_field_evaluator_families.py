"""Every metric family the reference's training tasks (`train_nochrome.json`) use, scored as OSWorld scores it:
for each metric function, small real files (WAV, video, images, vlcrc, Thunderbird prefs.js and filter rules,
CSV, JSON, SQLite, PDF, docx, LibreOffice registry files, VS Code keybindings...) that OSWorld's tasks would
accept, slightly change, or fail, scored through this project's `evaluate` (getters, cache, options) and by
calling OSWorld's function directly; the two agree, accepted files score 1 and failing ones 0.

test_metric_coverage.py checks that every metric train_nochrome uses is scored by some test."""

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from rlanything_jax.scenarios.osworld.evaluator import evaluate
from tests.scenarios.osworld import test_field_evaluators as pairs
from tests.scenarios.osworld.generated_files import (
    FILTER,
    FILTER_RULE,
    GIMPRC,
    KEYBINDING,
    PHOTO,
    PREFS_RULE,
    XUL,
    _a11y,
    _avi,
    _image,
    _pdf_pages,
    _portrait_pptx,
    _prefs,
    _rc,
    _shape,
    _sqlite,
    _styled_docx,
    _vlc_status,
    _wav,
    _xcu,
)
from tests.scenarios.osworld.test_field_evaluators import _context, _docx, _png


class Case(NamedTuple):
    func: str
    ext: str
    variants: dict[str, Any]      # variant -> result file bytes, or a value the rule getter gives
    expected: Any                 # gold file bytes (cloud_file), a rule (dict/list/str), or None (no expected)
    truths: dict[str, float]      # variant -> its score; graded metrics: see GRADED
    options: dict[str, Any] = {}


GRADED = {"compare_audios", "compare_images"}   # similarities in [0, 1]: equal ~1, wrong lowest


def _cases(tmp: Path) -> list[Case]:
    bars = _avi(tmp)
    photo, dark = _image(PHOTO), _image(PHOTO * 0.7)
    # OSWorld takes the second least common colour for the triangle: a one-pixel mark, a triangle, a background.
    centered, left = np.full((48, 64, 3), 255.0), np.full((48, 64, 3), 255.0)
    for row in range(8, 32):   # its centroid two thirds down: row 24, the middle
        half = (row - 8) // 2
        centered[row, 32 - half:32 + half + 1] = left[row, 12 - half:12 + half + 1] = (0, 0, 255)
    centered[0, 0] = left[0, 0] = (255, 0, 0)
    return [
        # vlc
        Case("compare_audios", "wav", {"equal": _wav(440), "slight": _wav(460), "wrong": _wav(0, noise=True)},
             _wav(440), {}),
        Case("compare_images", "png", {"equal": _png(), "slight": _png(noise=True), "wrong": _png(shift=90)},
             _png(), {}),
        Case("compare_videos", "avi", {"equal": bars, "slight": _avi(tmp, touch=3), "shorter": _avi(tmp, frames=6),
                                       "wrong": _avi(tmp, pattern="noise")},
             bars, {"equal": 1, "slight": 1, "shorter": 0, "wrong": 0}),
        Case("check_qt_max_volume", "", {"equal": _rc("qt-max-volume=200"),
                                         "wrong": _rc("qt-max-volume=125")},
             {"expected_qt_max_volume": 200}, {"equal": 1, "wrong": 0}),
        Case("check_qt_minimal_view", "", {"equal": _rc("qt-minimal-view=1"),
                                           "wrong": _rc("")},
             {"expected_qt_minimal_view": 1}, {"equal": 1, "wrong": 0}),
        Case("check_qt_slider_colours", "", {"equal": _rc("qt-slider-colours=0;0;0;20;20;20"),
                                             "wrong": _rc("")},
             {"type": "blackish"}, {"equal": 1, "wrong": 0}),
        Case("check_global_key_play_pause", "", {"equal": _rc("global-key-play-pause=Ctrl+p"),
                                                 "wrong": _rc("global-key-play-pause=")},
             {"expected_global_key_play_pause": 1}, {"equal": 1, "wrong": 0}),
        Case("check_one_instance_when_started_from_file", "",
             {"equal": _rc("one-instance-when-started-from-file=0"),
              "wrong": _rc("")},
             {"expected_one_instance_when_started_from_file": 0}, {"equal": 1, "wrong": 0}),
        Case("is_vlc_recordings_folder", "", {"equal": _rc("input-record-path=/home/user/Desktop"),
                                              "wrong": _rc("input-record-path=/tmp")},
             {"recording_file_path": "/home/user/Desktop"}, {"equal": 1, "wrong": 0}),
        Case("is_vlc_playing", "xml", {"equal": _vlc_status("playing", "/home/user/clip.mp4"),
                                       "paused": _vlc_status("paused", "/home/user/clip.mp4"),
                                       "wrong": _vlc_status("playing", "/home/user/other.mp4")},
             {"type": "file_name", "file_name": "clip.mp4"}, {"equal": 1, "paused": 0, "wrong": 0}),
        Case("is_vlc_fullscreen", "", {"equal": {"width": 1920, "height": 1080},
                                       "wrong": {"width": 800, "height": 600}},
             {"width": 1920, "height": 1080}, {"equal": 1, "wrong": 0}),
        # thunderbird
        Case("check_thunderbird_prefs", "js", {"equal": _prefs("Anonym\\nXYZ Lab", "false"),
                                               "unexpected": _prefs("Anonym\\nXYZ Lab", "true"),
                                               "wrong": _prefs("Anonym", "false")},
             PREFS_RULE, {"equal": 1, "unexpected": 0, "wrong": 0}),
        Case("check_thunderbird_filter", "dat", {"equal": FILTER.format(enabled="yes", word="discount").encode(),
                                                 "disabled": FILTER.format(enabled="no", word="discount").encode(),
                                                 "wrong": FILTER.format(enabled="yes", word="sale").encode()},
             FILTER_RULE, {"equal": 1, "disabled": 0, "wrong": 0}),
        # general
        Case("check_csv", "csv", {"equal": b"url,user\nimap://mail.example.com,ann\n",
                                  "wrong": b"url,user\nimap://outlook.office365.com,anonym@outlook.com\n"},
             {"unexpect": [{"url": "imap://outlook.office365.com", "user": "anonym@outlook.com"}]},
             {"equal": 1, "wrong": 0}),
        Case("check_list", "ls", {"equal": "Welcome to Outlook.eml\nA Test E-mail.eml\n".encode(),
                                  "wrong": b"A Test E-mail.eml\n"},
             {"expect": ["Welcome to .*\\.eml", "A Test E-mail.*\\.eml"]}, {"equal": 1, "wrong": 0}),
        Case("check_json", "json", {"equal": json.dumps({XUL: {"folderTree": {"mode": "smart,tags"}}}).encode(),
                                    "wrong": json.dumps({XUL: {"folderTree": {"mode": "all"}}}).encode()},
             {"expect": [{"key": [XUL, "folderTree", "mode"], "method": "re", "ref": "\\bsmart\\b"}]},
             {"equal": 1, "wrong": 0}),
        Case("run_sqlite3", "sqlite", {"equal": _sqlite(tmp, 1), "wrong": _sqlite(tmp, 0)},
             {"sql": "select sum(1) > 0 from messages where starred = 1"}, {"equal": 1, "wrong": 0}),
        Case("check_accessibility_tree", "", {"equal": _a11y("About Profiles"), "wrong": _a11y("Settings")},
             [{"selectors": ['application[name=Thunderbird] page-tab-list[attr|id="tabmail-tabs"]'
                             '>page-tab[name="About Profiles"]']}], {"equal": 1, "wrong": 0}),
        # pdf, table
        Case("check_pdf_pages", "pdf", {"equal": _pdf_pages(1), "wrong": _pdf_pages(2)},
             {"relation": "eq", "ref_value": 1}, {"equal": 1, "wrong": 0}),
        Case("compare_csv", "csv", {"equal": b"a,b\n1,2\n", "slight": b"a,b\n1,3\n", "wrong": b"x\n"},
             b"a,b\n1,2\n", {"equal": 1, "slight": 0, "wrong": 0}),
        # vscode
        Case("compare_text_file", "txt", {"equal": b"Hello\tworld\n", "spaced": b"Hello   world", "wrong": b"Hi"},
             b"Hello\tworld\n", {"equal": 1, "spaced": 1, "wrong": 0}, {"ignore_blanks": True}),
        Case("compare_config", "txt", {"equal": b"project", "wrong": b"project\n"}, {"expected": "project"},
             {"equal": 1, "wrong": 0}),
        Case("check_json_keybindings", "json",
             {"equal": b"// Place your key bindings in this file\n" + json.dumps([KEYBINDING]).encode(),
              "wrong": json.dumps([{**KEYBINDING, "key": "ctrl+g"}]).encode()},
             {"expected": KEYBINDING}, {"equal": 1, "wrong": 0}),
        Case("is_extension_installed", "", {"equal": "ms-python.python\n", "wrong": ""},
             {"type": "contain", "expected": "ms-python.python"}, {"equal": 1, "wrong": 0}),
        # gimp: the result (the edited image) against the original
        Case("check_image_size", "png", {"equal": photo, "wrong": _image(PHOTO[:40])}, {"height": 48, "width": 64},
             {"equal": 1, "wrong": 0}),
        Case("check_image_mirror", "png", {"equal": _image(PHOTO[:, ::-1]), "wrong": photo}, photo,
             {"equal": 1, "wrong": 0}),
        Case("check_file_exists_and_structure_sim", "png", {"equal": photo, "wrong": _image(PHOTO[::-1])}, photo,
             {"equal": 1, "wrong": 0}),
        Case("check_structure_sim_resized", "png",
             {"equal": _image(np.repeat(np.repeat(PHOTO, 2, 0), 2, 1)), "wrong": _image(PHOTO[::-1])}, photo,
             {"equal": 1, "wrong": 0}),
        Case("check_brightness_decrease_and_structure_sim", "png", {"equal": dark, "wrong": photo}, photo,
             {"equal": 1, "wrong": 0}),
        Case("check_contrast_increase_and_structure_sim", "png",
             {"equal": _image(((PHOTO - 128) * 1.6 + 128).clip(0, 255)), "wrong": dark}, photo,
             {"equal": 1, "wrong": 0}),
        Case("check_saturation_increase_and_structure_sim", "png",
             {"equal": _image((PHOTO - PHOTO.mean(-1, keepdims=True)) * 1.5 + PHOTO.mean(-1, keepdims=True)),
              "wrong": _image(PHOTO * 0.5 + PHOTO.mean(-1, keepdims=True) * 0.5)}, photo, {"equal": 1, "wrong": 0}),
        Case("check_palette_and_structure_sim", "png", {"equal": _image(PHOTO, mode="P"), "wrong": photo}, photo,
             {"equal": 1, "wrong": 0}),
        Case("check_green_background", "png",
             # (square: OSWorld's function indexes the pixels [x, y])
             {"equal": _image(_shape((0, 0, 0), 20, background=(20, 200, 20))[:, :48]),
              "wrong": _image(_shape((0, 0, 0), 20, background=(200, 20, 20))[:, :48])},
             _image(_shape((0, 0, 0), 20)[:, :48]), {"equal": 1, "wrong": 0}),
        Case("check_textbox_on_leftside", "png", {"equal": _image(_shape((0, 0, 0), 1)),
                                                  "wrong": _image(_shape((0, 0, 0), 30))}, None,
             {"equal": 1, "wrong": 0}),
        Case("check_triangle_position", "png", {"equal": _image(centered), "wrong": _image(left)}, None,
             {"equal": 1, "wrong": 0}),
        Case("check_config_status", "", {"equal": GIMPRC.format(theme="Dark").encode(),
                                         "wrong": GIMPRC.format(theme="Light").encode()},
             {"type:": "key-value", "key": "theme", "value": '"Dark"'}, {"equal": 1, "wrong": 0}),
        # slides: LibreOffice registry and python-pptx
        Case("check_auto_saving_time", "xcu",
             {"equal": _xcu("/org.openoffice.Office.Common/Save/Document", "AutoSaveTimeIntervall", "3"),
              "wrong": _xcu("/org.openoffice.Office.Common/Save/Document", "AutoSaveTimeIntervall", "10")},
             {"minutes": 3}, {"equal": 1, "wrong": 0}),
        Case("check_presenter_console_disable", "xcu",
             {"equal": _xcu("/org.openoffice.Office.Impress/Misc/Start", "EnablePresenterScreen", "false"),
              "wrong": _xcu("/org.openoffice.Office.Impress/Misc/Start", "EnablePresenterScreen", "true")},
             None, {"equal": 1, "wrong": 0}),
        Case("check_slide_orientation_Portrait", "pptx",
             {"equal": _portrait_pptx(6858000, 9144000), "wrong": _portrait_pptx(9144000, 6858000)}, None,
             {"equal": 1, "wrong": 0}),
        # docs
        Case("find_default_font", "xcu",
             {"equal": _xcu("/org.openoffice.Office.Writer/DefaultFont", "Standard", "Times New Roman"),
              "wrong": _xcu("/org.openoffice.Office.Writer/DefaultFont", "Standard", "Liberation Serif")},
             {"font_name": "Times New Roman"}, {"equal": 1, "wrong": 0}),
        Case("compare_font_names", "docx", {"equal": _styled_docx("Times New Roman"), "wrong": _styled_docx()},
             {"font_name": "Times New Roman"}, {"equal": 1, "wrong": 0}),
        Case("contains_page_break", "docx", {"equal": _styled_docx(page_break=True), "wrong": _styled_docx()},
             {}, {"equal": 1, "wrong": 0}),
        Case("compare_line_spacing", "docx", {"equal": _styled_docx(spacing=2.0), "wrong": _styled_docx(spacing=1.0)},
             _styled_docx(spacing=2.0), {"equal": 1, "wrong": 0}),
        Case("compare_docx_tables", "docx",
             {"equal": _styled_docx(table=pairs.ROWS), "slight": _styled_docx(table=pairs.ROWS[:2] + [["Bob", 6]]),
              "wrong": _styled_docx()},
             _styled_docx(table=pairs.ROWS), {"equal": 1, "slight": 0, "wrong": 0}),
        Case("has_page_numbers_in_footers", "docx", {"equal": _styled_docx(footer="Page 1"),
                                                     "wrong": _styled_docx(footer="Draft")}, None,
             {"equal": 1, "wrong": 0}),
        Case("check_italic_font_size_14", "docx",
             {"equal": _styled_docx(italic_size=14), "wrong": _styled_docx(italic_size=12)}, _docx(pairs.TEXT),
             {"equal": 1, "wrong": 0}),
    ]


CASE_FUNCS = [
    "compare_audios", "compare_images", "compare_videos", "check_qt_max_volume", "check_qt_minimal_view",
    "check_qt_slider_colours", "check_global_key_play_pause", "check_one_instance_when_started_from_file",
    "is_vlc_recordings_folder", "is_vlc_playing", "is_vlc_fullscreen", "check_thunderbird_prefs",
    "check_thunderbird_filter", "check_csv", "check_list", "check_json", "run_sqlite3", "check_accessibility_tree",
    "check_pdf_pages", "compare_csv", "compare_text_file", "compare_config", "check_json_keybindings",
    "is_extension_installed", "check_image_size", "check_image_mirror", "check_file_exists_and_structure_sim",
    "check_structure_sim_resized", "check_brightness_decrease_and_structure_sim",
    "check_contrast_increase_and_structure_sim", "check_saturation_increase_and_structure_sim",
    "check_palette_and_structure_sim", "check_green_background", "check_textbox_on_leftside",
    "check_triangle_position", "check_config_status", "check_auto_saving_time", "check_presenter_console_disable",
    "check_slide_orientation_Portrait", "find_default_font", "compare_font_names", "contains_page_break",
    "compare_line_spacing", "compare_docx_tables", "has_page_numbers_in_footers", "check_italic_font_size_14",
]


def _score_both(field, tmp_path: Path, case: Case, data: Any) -> tuple[float, float]:
    suffix = f".{case.ext}" if case.ext else ""
    files, name, gold = {}, "result" + suffix, "gold" + suffix
    if isinstance(data, bytes):
        files[name] = data
        result_spec = {"type": "cache_file", "path": name}
    else:
        result_spec = {"type": "rule", "rules": data}
    evaluator = {"func": case.func, "result": result_spec, "options": case.options}
    if isinstance(case.expected, bytes):
        files[gold] = case.expected
        evaluator["expected"] = {"type": "cloud_file", "path": f"https://example.invalid/{gold}", "dest": gold}
    elif case.expected is not None:
        evaluator["expected"] = {"type": "rule", "rules": case.expected}
    context = _context(tmp_path, files)
    ours = evaluate(evaluator, context, "DONE").score
    args = [str(context.cache_dir / name) if isinstance(data, bytes) else data]
    if case.expected is not None:
        args.append(str(context.cache_dir / gold) if isinstance(case.expected, bytes) else case.expected)
    theirs = float(field.metrics[case.func](*args, **case.options))
    return ours, theirs


@pytest.mark.parametrize("index", range(len(CASE_FUNCS)), ids=CASE_FUNCS)
def test_each_family_scores_as_osworlds_functions(field, tmp_path, index):
    case = _cases(tmp_path)[index]
    assert case.func == CASE_FUNCS[index]
    scores = {}
    for variant, data in case.variants.items():
        ours, theirs = _score_both(field, tmp_path / variant, case, data)
        assert ours == theirs, (case.func, variant, ours, theirs)
        scores[variant] = ours
    if case.func in GRADED:
        assert scores["equal"] >= 0.99 and scores["wrong"] < min(scores["slight"], 0.9), scores
    else:
        assert scores == case.truths, (case.func, scores)
