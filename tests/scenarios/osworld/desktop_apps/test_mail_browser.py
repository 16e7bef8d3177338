"""Official Thunderbird and Chrome tasks on a local desktop with the real application (Chromium as
`google-chrome`): set up as OSWorld sets them up (a Thunderbird profile generated in place of the task's
download), scored by OSWorld's evaluators (check_thunderbird_prefs on prefs.js; the Chrome getters on
~/.config/google-chrome/Default/Preferences): 0 untouched, 1 after the scripted solution, the setting
changed in the application's own profile after it quit, as its settings page would save it."""

import io
import json
import tarfile

import pytest

from tests.scenarios.osworld.desktop_apps.official import (
    play,
    require_apps,
    set_config_line,
    set_json,
    stop_app,
    task,
    wait_file,
)

PROFILE = "t5q2a5hp.default-release"   # the profile the tasks' evaluators read
DEBIAN_INSTALL_HASH = "FDC34C9F024745EB"   # Thunderbird's name for its install at /usr/lib/thunderbird
PROFILES_INI = f"""[General]
StartWithLastProfile=1
Version=2

[Profile0]
Name=default-release
IsRelative=1
Path={PROFILE}
Default=1

[Install{DEBIAN_INSTALL_HASH}]
Default={PROFILE}
Locked=1
"""
PREFS = {   # one local account with identity id1, as the tasks' profile has
    "mail.account.account1.identities": "id1", "mail.account.account1.server": "server1",
    "mail.accountmanager.accounts": "account1,account2", "mail.accountmanager.defaultaccount": "account1",
    "mail.account.account2.server": "server2", "mail.accountmanager.localfoldersserver": "server2",
    "mail.identity.id1.fullName": "Anonym", "mail.identity.id1.useremail": "anonym-x2024@outlook.com",
    "mail.server.server1.hostname": "outlook.office365.com", "mail.server.server1.type": "imap",
    "mail.server.server1.userName": "anonym-x2024@outlook.com", "mail.server.server1.name": "anonym-x2024@outlook.com",
    "mail.server.server2.hostname": "Local Folders", "mail.server.server2.type": "none",
    "mail.server.server2.userName": "nobody", "mail.server.server2.name": "Local Folders",
    "mail.shell.checkDefaultClient": False, "mail.provider.suppress_dialog_on_startup": True,
}


def _profile_tarball() -> bytes:
    prefs = "".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in PREFS.items())
    files = {".thunderbird/profiles.ini": PROFILES_INI,
             ".thunderbird/installs.ini": f"[{DEBIAN_INSTALL_HASH}]\nDefault={PROFILE}\nLocked=1\n",
             f".thunderbird/{PROFILE}/prefs.js": prefs}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


THUNDERBIRD_TASKS = {   # id prefix: the prefs the solution sets
    "10a730d5": {"extensions.activeThemeID": "thunderbird-compact-dark@mozilla.org"},   # dark theme
    "f201fbc3": {"mail.identity.id1.auto_quote": False},                                # no quoting on reply
    "3f28fe4f": {"mail.identity.id1.htmlSigText": "Anonym\nXYZ Lab", "mail.identity.id1.htmlSigFormat": False},
}
PREFERENCES = "~/.config/google-chrome/Default/Preferences"
CHROME_TASKS = {   # id prefix: the Preferences keys the solution sets
    "030eeff7": {"enable_do_not_track": True},
    "bb5e4c0d": {"default_search_provider_data.template_url_data": {
        "short_name": "Bing", "keyword": "bing.com", "url": "https://www.bing.com/search?q={searchTerms}",
        "favicon_url": "https://www.bing.com/favicon.ico", "safe_for_autoreplace": False, "id": "3"}},
    "2ae9ba84": {"profile.name": "Thomas"},
}


@pytest.fixture(scope="module")
def apps_desktop(desktop_root):
    require_apps("thunderbird", "chromium", "socat")
    from rlanything_jax.scenarios.osworld.local_desktop import DesktopOptions, LocalDesktop
    with LocalDesktop(DesktopOptions(runtime_root=desktop_root), start=False) as session:
        yield session


@pytest.mark.slow
@pytest.mark.parametrize("solved", [False, True], ids=["untouched", "solved"])
@pytest.mark.parametrize("id_prefix", list(THUNDERBIRD_TASKS))
def test_thunderbird_task(apps_desktop, tmp_path, id_prefix, solved):
    def solve(client):
        stop_app(client, "thunderbird", quit_keys=("ctrl", "q"), window="Thunderbird")   # it writes prefs.js
        for key, value in THUNDERBIRD_TASKS[id_prefix].items():
            set_config_line(client, f"~/.thunderbird/{PROFILE}/prefs.js", rf'user_pref\("{key}",',
                            f"user_pref({json.dumps(key)}, {json.dumps(value)});")
    outcome = play(apps_desktop, task("thunderbird", id_prefix), tmp_path, "Mozilla Thunderbird",
                   {"thunderbird-profile.tar.gz": _profile_tarball()}, solve=solve if solved else None)
    assert outcome.score == float(solved), outcome.detail


@pytest.mark.slow
@pytest.mark.parametrize("solved", [False, True], ids=["untouched", "solved"])
@pytest.mark.parametrize("id_prefix", list(CHROME_TASKS))
def test_chrome_task(apps_desktop, tmp_path, id_prefix, solved):
    def solve(client):
        wait_file(client, PREFERENCES)   # Chrome has made its profile (a few seconds after its window)
        stop_app(client, "chrome")       # it writes Preferences as it ends
        set_json(client, PREFERENCES, CHROME_TASKS[id_prefix])
    outcome = play(apps_desktop, task("chrome", id_prefix), tmp_path, "Chromium", solve=solve if solved else None)
    assert outcome.score == float(solved), outcome.detail
