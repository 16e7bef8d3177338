"""Small real files for OSWorld's metric functions (test_field_evaluator_families.py): WAV, video, images,
PDF, SQLite, docx, pptx, LibreOffice registry entries, VLC status and config, Thunderbird prefs and filters,
accessibility trees, GIMP's gimprc."""

import io
import sqlite3
import wave
from pathlib import Path

import numpy as np

from tests.scenarios.osworld import test_field_evaluators as pairs


def _wav(freq: float, noise: bool = False, seconds: float = 0.5, rate: int = 22050) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    signal = np.random.default_rng(0).uniform(-1, 1, t.size) if noise else np.sin(2 * np.pi * freq * t)
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(rate)
        sound.writeframes((signal * 0.5 * 32767).astype("<i2").tobytes())
    return out.getvalue()


def _avi(tmp_path: Path, frames: int = 10, pattern: str = "bars", touch: int = -1) -> bytes:
    import cv2

    path = tmp_path / f"video-{pattern}-{frames}-{touch}.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 5, (64, 64))
    y, x = np.mgrid[0:64, 0:64]
    for index in range(frames):
        if pattern == "bars":
            gray = ((x // 8 + y // 16 + index) % 2) * 200
        else:
            gray = np.random.default_rng(index).integers(0, 256, (64, 64))
        frame = np.repeat(gray[..., None], 3, axis=-1).astype(np.uint8)
        if index == touch:
            frame[0:2, 0:2] = 255 - frame[0:2, 0:2]
        writer.write(frame)
    writer.release()
    return path.read_bytes()


def _image(pixels: np.ndarray, mode: str | None = None) -> bytes:
    from PIL import Image

    image = Image.fromarray(pixels.astype(np.uint8))
    if mode == "P":
        image = image.convert("P", palette=Image.Palette.ADAPTIVE)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


Y, X = np.mgrid[0:48, 0:64]
PHOTO = np.stack([X * 3 + 40, Y * 3 + 30, (X + Y) * 2 + 20], axis=-1).clip(0, 255)


def _shape(color, left: int, top: int = 16, background=(255, 255, 255)) -> np.ndarray:
    pixels = np.empty((48, 64, 3))
    pixels[:] = background
    pixels[top:top + 12, left:left + 12] = color
    return pixels


def _pdf_pages(count: int) -> bytes:
    import fitz

    document = fitz.open()
    for index in range(count):
        document.new_page().insert_text((72, 72), f"Page {index + 1}")
    return document.tobytes()


def _sqlite(tmp_path: Path, value: int) -> bytes:
    path = tmp_path / f"db-{value}.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("create table messages (id integer, starred integer)")
        connection.execute("insert into messages values (1, ?)", (value,))
    return path.read_bytes()


def _styled_docx(font="Arial", spacing=None, page_break=False, table=None, footer=None, italic_size=None):
    from docx import Document
    from docx.enum.text import WD_BREAK
    from docx.shared import Pt

    document = Document()
    for text in pairs.TEXT:
        paragraph = document.add_paragraph()
        run = paragraph.add_run(text)
        run.font.name = font
        run.italic = italic_size is not None
        if italic_size is not None:
            run.font.size = Pt(italic_size)
        if spacing is not None:
            paragraph.paragraph_format.line_spacing = spacing
        if page_break:
            run.add_break(WD_BREAK.PAGE)
    if table is not None:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for i, row in enumerate(table):
            for j, cell in enumerate(row):
                grid.cell(i, j).text = str(cell)
    if footer is not None:
        document.sections[0].footer.paragraphs[0].text = footer
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _portrait_pptx(width: int, height: int) -> bytes:
    from pptx import Presentation

    deck = Presentation()
    deck.slide_width, deck.slide_height = width, height
    deck.slides.add_slide(deck.slide_layouts[6])
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _xcu(path: str, name: str, value: str) -> bytes:
    """A LibreOffice registrymodifications.xcu with one setting."""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
            'xmlns:xs="http://www.w3.org/2001/XMLSchema">\n'
            '<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="FirstRun" oor:op="fuse">'
            '<value>false</value></prop></item>\n'
            f'<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>\n'
            '</oor:items>\n').encode()


def _vlc_status(state: str, filename: str) -> bytes:
    return (f'<?xml version="1.0" encoding="utf-8" standalone="yes" ?><root><volume>256</volume><state>{state}'
            '</state><information><category name="meta"><info name="filename">'
            f'{filename}</info></category></information></root>').encode()


def _a11y(tab: str) -> str:
    return ('<desktop-frame xmlns:attr="https://accessibility.ubuntu.example.org/ns/attributes" '
            'xmlns:st="https://accessibility.ubuntu.example.org/ns/state"><application name="Thunderbird">'
            f'<page-tab-list attr:id="tabmail-tabs"><page-tab name="Inbox"/><page-tab name="{tab}"/>'
            '</page-tab-list></application></desktop-frame>')


FILTER = ('version="9"\nlogging="no"\nname="Discounts"\nenabled="{enabled}"\ntype="17"\naction="Move to folder"\n'
          'actionValue="mailbox://nobody@Local%20Folders/Promotions"\ncondition="AND (subject,contains,{word})"\n')
FILTER_RULE = {"expect": [{"enabled": "yes", "action": "Move to folder",
                           "actionValue": "mailbox://nobody@Local%20Folders/Promotions",
                           "condition": ["AND (subject,contains,discount)"]}]}
PREFS = ('// Mozilla User Preferences\nuser_pref("mail.identity.id1.fullName", "Anonym");\n'
         'user_pref("mail.identity.id1.htmlSigText", "{sig}");\nuser_pref("mail.spellcheck.inline", {spell});\n')
PREFS_RULE = {"expect": {"mail.identity.id1.htmlSigText": {"method": "re.S", "ref": "Anonym\\nXYZ Lab"}},
              "unexpect": {"mail.spellcheck.inline": {"method": "eq", "ref": True}}}
VLCRC = "[qt]\n# qt-max-volume=125\n{line}\n[core]\n#one-instance=0\n"


def _rc(line: str) -> bytes:
    return VLCRC.format(line=line).encode()


def _prefs(signature: str, spellcheck: str) -> bytes:
    return PREFS.format(sig=signature, spell=spellcheck).encode()


KEYBINDING = {"key": "ctrl+f", "command": "-list.find", "when": "listFocus && listSupportsFind"}
XUL = "chrome://messenger/content/messenger.xhtml"
GIMPRC = "# GIMP gimprc\n(default-image (width 640) (height 400))\n(theme \"{theme}\")\n(undo-levels 5)\n"
