# /// scritp
# dependencies = []
#
# [tool.python-sandbox]
# net = "off"
# ///
import urllib.request
