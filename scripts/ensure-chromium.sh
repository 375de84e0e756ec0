#!/usr/bin/env bash
# Makes sure Debian's Chromium and its WebDriver (chromedriver) are installed, for the test that
# opens a campaign's dashboard in a headless browser. Idempotent: returns at once when both are there.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

have_chromium() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

if have_chromium; then
    exit 0
fi
apt_install "Chromium or chromedriver" chromium chromium-driver
have_chromium
echo "ensure-chromium: Chromium and chromedriver installed."
