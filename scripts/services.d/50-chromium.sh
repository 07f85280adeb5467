# Chromium for the console's browser test (internal/cli TestConsoleBrowser): installed once.
"$root/scripts/chromium.sh"
