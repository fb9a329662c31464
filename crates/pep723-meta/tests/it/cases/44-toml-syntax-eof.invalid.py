# /// script
# dependencies = [
# ///
