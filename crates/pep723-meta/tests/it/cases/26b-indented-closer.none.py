# /// script
# dependencies = ["rich"]
  # ///
