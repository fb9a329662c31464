#!/usr/bin/env python
# -*- coding: latin-1 -*-
# /// script
# dependencies = ["rich"]
# ///
