# /// script
# dependancies = ["rich"]
# ///
