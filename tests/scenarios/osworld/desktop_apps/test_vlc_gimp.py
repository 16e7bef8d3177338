"""Official VLC and GIMP tasks on a local desktop with the real application: set up as OSWorld sets them
up, scored 0 untouched and 1 after the scripted solution (the setting changed in the application's own
configuration file after it quit, as its preferences dialog would save it), by OSWorld's evaluators
(vlc_config / gimp_config_file getters, check_qt_* / check_config_status metrics)."""

import pytest

from tests.scenarios.osworld.desktop_apps.official import play, require_apps, set_config_line, stop_app, task

VLCRC = "~/.config/vlc/vlcrc"
GIMPRC = "~/.config/GIMP/2.10/"
GIMP_WINDOW = "GNU Image Manipulation Program"

VLC_TASKS = {   # id prefix: (vlcrc key, solved value)
    "215dfd39": ("qt-bgcone", "0"),              # disable the cone icon in the splash screen
    "9195653c": ("qt-max-volume", "200"),        # maximum volume 200%
    "8ba5ae7a": ("input-record-path", "/home/user/Desktop"),   # recordings to the Desktop
}
GIMP_TASKS = {   # id prefix: (file, key, solved line)
    "7767eef2": ("gimprc", "theme", '(theme "Light")'),
    "7b7617bd": ("gimprc", "undo-levels", "(undo-levels 100)"),
    "d52d6308": ("sessionrc", "hide-docks", "(hide-docks yes)"),
}


@pytest.fixture(scope="module")
def apps_desktop(desktop_root):
    require_apps("vlc", "gimp")
    from rlanything_jax.scenarios.osworld.local_desktop import DesktopOptions, LocalDesktop
    with LocalDesktop(DesktopOptions(runtime_root=desktop_root), start=False) as session:
        yield session


@pytest.mark.slow
@pytest.mark.parametrize("solved", [False, True], ids=["untouched", "solved"])
@pytest.mark.parametrize("id_prefix", list(VLC_TASKS))
def test_vlc_task(apps_desktop, tmp_path, id_prefix, solved):
    key, value = VLC_TASKS[id_prefix]

    def solve(client):
        stop_app(client, "vlc")
        set_config_line(client, VLCRC, rf"#?{key}=", f"{key}={value}")
    outcome = play(apps_desktop, task("vlc", id_prefix), tmp_path, "VLC media player", solve=solve if solved else None)
    assert outcome.score == float(solved), outcome.detail


@pytest.mark.slow
@pytest.mark.parametrize("solved", [False, True], ids=["untouched", "solved"])
@pytest.mark.parametrize("id_prefix", list(GIMP_TASKS))
def test_gimp_task(apps_desktop, tmp_path, id_prefix, solved):
    name, key, line = GIMP_TASKS[id_prefix]

    def solve(client):
        stop_app(client, "gimp", quit_keys=("ctrl", "q"), window=GIMP_WINDOW)   # GIMP writes its sessionrc as it quits
        set_config_line(client, GIMPRC + name, rf"\({key} ", line)
    outcome = play(apps_desktop, task("gimp", id_prefix), tmp_path, GIMP_WINDOW, solve=solve if solved else None)
    assert outcome.score == float(solved), outcome.detail
