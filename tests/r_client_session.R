# A DataSHIELD user's first hour in R, against dsfed sites: the unmodified R client (DSI, DSOpal,
# opalr, dsBaseClient) as installed by ../shared/tools/r-datashield-client/install.sh.
# Run by tests/test_r_client.py: Rscript r_client_session.R CONFIG.json OUT.json
# CONFIG: {"lib": R library, "sites": {name: {"url", "user", "password", "token"}}, "table": "P.t"}
# OUT: {label: {"value": <what the call returned, reduced to numbers and names>, "errors": {site: message}}}

args <- commandArgs(trailingOnly = TRUE)
config <- jsonlite::fromJSON(args[1], simplifyVector = FALSE)
.libPaths(c(config$lib, .libPaths()))
suppressPackageStartupMessages({library(DSI); library(DSOpal); library(dsBaseClient)})
grDevices::pdf(NULL)  # ds.histogram plots: nowhere
options(datashield.progress = FALSE)

out <- list()
run <- function(label, expr, keep = identity) {
  DSI:::.clearLastErrors()  # datashield.methods and pkg_status do not clear the last call's errors
  value <- tryCatch({ result <- expr; keep(result) }, error = function(e) NULL)  # expr forced: R is lazy
  errors <- lapply(DSI::datashield.errors(), function(m) paste(m, collapse = " "))
  out[[label]] <<- list(value = value, errors = if (length(errors)) errors else NULL)
  invisible(value)
}
builder <- function(credential) {
  b <- DSI::newDSLoginBuilder()
  for (name in names(config$sites)) {
    s <- config$sites[[name]]
    if (credential == "token") {
      b$append(server = name, url = s$url, token = s$token, table = config$table, driver = "OpalDriver")
    } else {
      b$append(server = name, url = s$url, user = s$user, password = s$password, table = config$table,
               driver = "OpalDriver")
    }
  }
  b$build()
}
matrix_rows <- function(m) lapply(seq_len(nrow(m)), function(i) unname(as.list(m[i, ])))

conns <- suppressWarnings(DSI::datashield.login(builder("password"), assign = TRUE, symbol = "D"))
run("login", names(conns))

run("ls", ds.ls(datasources = conns), function(r) lapply(r, function(s) as.list(s$objects.found)))
run("dim", ds.dim("D", type = "both", datasources = conns), function(r) lapply(r, as.integer))
run("length", ds.length("D$age", type = "combine", datasources = conns), function(r) r[[1]])
run("colnames", ds.colnames("D", datasources = conns))
run("class", list(age = ds.class("D$age", datasources = conns), tgrade = ds.class("D$tgrade", datasources = conns),
                  score = ds.class("D$score", datasources = conns)))
run("mean", ds.mean("D$age", type = "both", datasources = conns),
    function(r) list(split = as.list(r$Mean.by.Study[, "EstimatedMean"]), combine = r$Global.Mean[1, "EstimatedMean"]))
run("var", ds.var("D$score", type = "both", datasources = conns),
    function(r) list(split = as.list(r$Variance.by.Study[, "EstimatedVar"]), combine = r$Global.Variance[1, "EstimatedVar"]))
run("quantileMean", ds.quantileMean("D$age", type = "combine", datasources = conns), as.list)
run("summary", ds.summary("D$age", datasources = conns),
    function(r) lapply(r, function(s) list(class = s$class, length = s$length, quantiles = as.list(s[[3]]))))
run("table1", ds.table("D$menostat", datasources = conns),
    function(r) as.list(r$output.list$TABLES.COMBINED_all.sources_counts))
run("table1_refused", ds.table("D$tgrade", datasources = conns), function(r) "released")
run("table2", ds.table("D$y", "D$cens", datasources = conns),
    function(r) list(counts = matrix_rows(r$output.list$TABLES.COMBINED_all.sources_counts),
                     dimnames = dimnames(r$output.list$TABLES.COMBINED_all.sources_counts)))
run("table2_refused", ds.table("D$menostat", "D$horTh", datasources = conns), function(r) "released")
run("histogram", ds.histogram("D$age", num.breaks = 2, type = "combine", datasources = conns),
    function(r) list(breaks = r$breaks, counts = r$counts))
if (!is.null(out$histogram$value)) {
  # each site's answer to the call ds.histogram sent: type = "combine" adds the counts and drops the
  # sites' invalidcells, merged and why (dsBaseClient shows invalidcells only with type = "split")
  b <- out$histogram$value$breaks
  run("histogram_sites", DSI::datashield.aggregate(conns, paste0("histogramDS2(D$age,2,", b[1], ",", b[length(b)],
                                                                  ",1,3,0.25)")),
      function(r) lapply(r, function(s) list(counts = s$histobject$counts, invalidcells = s$invalidcells,
                                              merged = if (is.null(s$merged)) list() else s$merged)))
}
run("histogram_refused", ds.histogram("D$age", datasources = conns), function(r) "released")
run("asFactor", ds.asFactor("D$cens", newobj.name = "censF", datasources = conns), function(r) r$all.unique.levels)
run("asFactor_class", ds.class("censF", datasources = conns))
run("asNumeric", ds.asNumeric("censF", newobj = "censN", datasources = conns), function(r) r$is.object.created)
run("asNumeric_mean", ds.mean("censN", type = "combine", datasources = conns), function(r) r$Global.Mean[1, "EstimatedMean"])
run("make", ds.make("D$age*2", newobj = "age2", datasources = conns), function(r) r$is.object.created)
run("make_mean", ds.mean("age2", type = "combine", datasources = conns), function(r) r$Global.Mean[1, "EstimatedMean"])
run("dataFrameSubset", ds.dataFrameSubset(df.name = "D", V1.name = "D$age", V2.name = "60", Boolean.operator = ">",
                                          newobj = "older", datasources = conns), function(r) r$is.object.created)
run("dataFrameSubset_dim", ds.dim("older", type = "combine", datasources = conns), function(r) as.integer(r[[1]]))
run("dataFrameSubset_refused", ds.dataFrameSubset(df.name = "D", V1.name = "D$age", V2.name = "75",
                                                  Boolean.operator = ">", newobj = "oldest", datasources = conns),
    function(r) "released")
run("subset", ds.subset(x = "D", subset = "sub48", logicalOperator = "age>=", threshold = 48, datasources = conns),
    function(r) "assigned")
run("subset_length", ds.length("sub48$age", type = "combine", datasources = conns), function(r) r[[1]])
run("completeCases", ds.completeCases("D", newobj = "Dc", datasources = conns), function(r) r$is.object.created)
run("completeCases_dim", ds.dim("Dc", type = "combine", datasources = conns), function(r) as.integer(r[[1]]))
run("cor", ds.cor("D$age", "D$score", type = "combine", datasources = conns),
    function(r) list(r = r$`Correlation Matrix`[1, 2], n = r$`Number of complete cases used`[1, 1]))
run("tapply", ds.tapply("D$score", INDEX.names = "D$menostat", FUN.name = "mean", datasources = conns),
    function(r) lapply(r, function(s) list(mean = as.list(s$Mean), n = as.list(s$N))))
run("meanSdGp", ds.meanSdGp("D$age", "D$horTh", datasources = conns),
    function(r) list(mean = as.list(r$Mean_gp_study[, "COMBINE"]), sd = as.list(r$StDev_gp_study[, "COMBINE"]),
                     n = as.list(r$Nvalid_gp_study[, "COMBINE"])))
run("glm", suppressMessages(ds.glm(y ~ score + age, data = "D", family = "binomial", datasources = conns)),
    function(r) list(coefficients = matrix_rows(r$coefficients[, 1:2, drop = FALSE]), dev = r$dev, df = r$df,
                     names = rownames(r$coefficients)))
run("glmSLMA", suppressMessages(ds.glmSLMA(y ~ score + age, family = "binomial", dataName = "D",
                                           datasources = conns)),
    function(r) list(betas = matrix_rows(r$betamatrix.all), ses = matrix_rows(r$sematrix.all),
                     pooled = matrix_rows(r$SLMA.pooled.ests.matrix), names = rownames(r$betamatrix.all)))
run("methods", DSI::datashield.methods(conns, type = "aggregate"),
    function(r) list(names = sort(unique(r$name)), servers = sort(unique(r$server))))
run("pkg_status", DSI::datashield.pkg_status(conns),
    function(r) list(packages = as.list(rownames(r$package_status)), installed = all(r$package_status)))
run("ls_after", ds.ls(datasources = conns), function(r) lapply(r, function(s) as.list(s$objects.found)))
run("rm", ds.rm("age2", datasources = conns), function(r) lapply(r, function(s) s$return.message))
run("ls_after_rm", ds.ls(datasources = conns), function(r) lapply(r, function(s) as.list(s$objects.found)))
run("logout", DSI::datashield.logout(conns), function(r) "done")

tokens <- suppressWarnings(DSI::datashield.login(builder("token"), assign = TRUE, symbol = "T",
                                                 variables = c("age", "y", "score")))
run("token_dim", ds.dim("T", type = "combine", datasources = tokens), function(r) as.integer(r[[1]]))
run("token_colnames", ds.colnames("T", datasources = tokens), function(r) lapply(r, as.list))
run("token_logout", DSI::datashield.logout(tokens), function(r) "done")

writeLines(jsonlite::toJSON(out, auto_unbox = TRUE, digits = NA, null = "null", na = "null"), args[2])
