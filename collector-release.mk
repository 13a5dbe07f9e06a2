# The one collector release bpfprofiler builds against. The Makefile, ocb's
# manifest (builder-config.yaml), go.mod and the end-to-end user manifest
# follow it; `make check-release` (run by CI) fails when any of them is at
# another release, and `make upgrade-collector` moves them all after an edit
# here.
COLLECTOR_CORE    := v0.165.0
COLLECTOR_STABLE  := v1.71.0
COLLECTOR_CONTRIB := v0.165.1
# mdatagen is served by the module proxy up to v0.161.0 only (v0.162.0 to
# v0.165.0 answer 404); its generated code builds against the release above.
MDATAGEN_VERSION  := v0.161.0
