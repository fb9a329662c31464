# /// ｓcript
# dependencies = []
# ///
