# /// Scirpt
# dependencies = []
# ///
