"""`manager console`: the operator's page in a browser (server.py), over the same snapshots as
`manager status` (model.py turns them into the page's JSON); static/ holds the page, its
script and uPlot (vendored from npm, MIT: static/uPlot.LICENSE) so it works offline."""
