# Puts an uploaded folder in place of another, so no stale file of an older version survives; the
# upload is removed whatever happens.
#   STAGING  the uploaded folder;  FOLDER  where it belongs (absolute: the caller's HostPath expands ~/)
set -e
trap 'rm -rf "$STAGING"' EXIT
old="$FOLDER.replaced-$$"
if [ -e "$FOLDER" ]; then mv "$FOLDER" "$old"; fi
mv "$STAGING" "$FOLDER"
rm -rf "$old"
