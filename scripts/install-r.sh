#!/usr/bin/env bash
# R 4.2 and the R packages the cross-checks use (pROC, rms, TH.data, survival, ranger, jsonlite, metafor),
# from Debian's packages. Nothing is installed when they are all there already.
exec "$(dirname "$0")/apt-install.sh" "R cross-checks" \
  r-base-core r-cran-proc r-cran-rms r-cran-th.data r-cran-survival r-cran-ranger r-cran-jsonlite r-cran-metafor
