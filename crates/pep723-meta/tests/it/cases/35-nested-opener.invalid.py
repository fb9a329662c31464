# /// script
# dependencies = ["rich"]
# /// script
# ///
