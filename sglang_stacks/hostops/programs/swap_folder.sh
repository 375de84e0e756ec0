# Puts an uploaded folder in place of another, so no stale file of an older version survives; the
# upload is removed whatever happens.
#   STAGING  the uploaded folder;  FOLDER  where it belongs (absolute: the caller's HostPath expands ~/)
set -e
trap 'rm -rf "$STAGING"' EXIT
aside="$FOLDER.replaced"
# A swap cut short between its two renames left the folder in use aside and none in its place:
# that folder is still the artifact, so it goes back before anything else.
if [ ! -e "$FOLDER" ] && [ -d "$aside" ]; then mv -T "$aside" "$FOLDER"; fi
rm -rf "$aside"
if [ -e "$FOLDER" ]; then mv -T "$FOLDER" "$aside"; fi
# -T: never into a folder that another swap put there meanwhile; that swap's folder stays.
mv -T "$STAGING" "$FOLDER"
rm -rf "$aside"
