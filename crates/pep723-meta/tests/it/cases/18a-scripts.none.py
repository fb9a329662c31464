# /// scripts
# dependencies = []
# ///
