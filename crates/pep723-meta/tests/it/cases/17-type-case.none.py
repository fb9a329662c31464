# /// Script
# dependencies = []
# ///
