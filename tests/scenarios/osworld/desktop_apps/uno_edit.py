"""Edits a document open in the desktop's running LibreOffice, through LibreOffice's own API (UNO), and
saves it in its format: the tests' scripted solutions of office tasks. Runs inside a desktop session
under Debian's python3 with python3-uno:

    python3 uno_edit.py /home/user/file.xlsx 'doc.Sheets.getByIndex(0).getCellRangeByName("E3").Formula = "=1+1"'

`soffice --accept=...` handed to the running instance makes it listen on a UNO pipe; the code runs with
`doc` (the open document), `uno` and `ctx` bound, then the document is stored (XStorable.store keeps
the file's format, as Keep Current Format does). A path of `-` runs the code without a document.
"""

import os
import subprocess
import sys
import time

import uno

PIPE = "rla_uno"


def connect(timeout_s=30.0):
    subprocess.Popen(["soffice", f"--accept=pipe,name={PIPE};urp;"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    local = uno.getComponentContext()
    resolver = local.ServiceManager.createInstanceWithContext("com.sun.star.bridge.UnoUrlResolver", local)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return resolver.resolve(f"uno:pipe,name={PIPE};urp;StarOffice.ComponentContext")
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def open_document(ctx, path, timeout_s=30.0):
    desktop = ctx.ServiceManager.createInstanceWithContext("com.sun.star.frame.Desktop", ctx)
    url = uno.systemPathToFileUrl(os.path.abspath(path))
    deadline = time.monotonic() + timeout_s
    while True:
        components = desktop.getComponents().createEnumeration()
        while components.hasMoreElements():
            component = components.nextElement()
            if hasattr(component, "getURL") and component.getURL() == url:
                return component
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} is not open in LibreOffice")
        time.sleep(0.2)


def main():
    path, code = sys.argv[1], sys.argv[2]
    ctx = connect()
    doc = open_document(ctx, path) if path != "-" else None   # "-": settings only, no document
    exec(code, {"doc": doc, "uno": uno, "ctx": ctx})
    if doc is not None:
        doc.store()
        print("stored", path)


if __name__ == "__main__":
    main()
