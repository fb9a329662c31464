#  /// script
# dependencies = []
# ///
