#!/usr/bin/env bash
# Makes a headless Chromium available for tests/test_browser.py, from the system's package manager only
# (Playwright's own browser download is never used: the test drives /usr/bin/chromium).
#
#   bash scripts/install-chromium.sh     # exit 0 when Chromium is there afterwards, 1 otherwise (with the reason)
#
# Installs Debian/Ubuntu's `chromium` with apt-get when it is missing and this user may install packages
# (root, or sudo without a password). Anything else: prints why and what to do instead.
set -u

find_chromium() {
    for candidate in "${CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if found=$(find_chromium); then
    echo "chromium: found $found ($("$found" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium: not found, and this system has no apt-get. Install Chromium with your package manager" \
         "and point CHROMIUM=/path/to/chromium at it; the browser test is skipped until then." >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "chromium: not found, and installing it needs root (no passwordless sudo here). Run" \
         "'sudo apt-get install chromium' yourself; the browser test is skipped until then." >&2
    exit 1
fi

echo "chromium: installing Debian's chromium with apt-get (a few minutes the first time)"
export DEBIAN_FRONTEND=noninteractive
if ! "${as_root[@]}" apt-get update -q; then
    echo "chromium: 'apt-get update' failed (no network or no package mirror?); the browser test is skipped." >&2
    exit 1
fi
# Debian names the package chromium; older Ubuntu releases chromium-browser (a snap shim on newer ones).
if ! "${as_root[@]}" apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core; then
    if ! "${as_root[@]}" apt-get install -y -q --no-install-recommends chromium-browser; then
        echo "chromium: apt-get could not install chromium; the browser test is skipped." >&2
        exit 1
    fi
fi

if found=$(find_chromium); then
    echo "chromium: installed $found ($("$found" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi
echo "chromium: apt-get finished but no chromium binary is on the usual paths; set CHROMIUM=/path/to/it." >&2
exit 1
