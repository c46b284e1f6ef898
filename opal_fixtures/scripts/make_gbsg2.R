## make_gbsg2.R -- build the GBSG2 test fixtures for dsfed.
##
## Follows the "Data analysis" section of Schalk, Rehms et al. (2024):
## German Breast Cancer Study Group data (TH.data::GBSG2, 686 rows), 60 %
## training split (412 rows), the remaining 274 rows minus the 24 patients
## censored before 730 days (250 rows) spread over five sites of sizes
## 51, 45, 55, 46, 53. Model: ranger random survival forest, 20 trees,
## otherwise ranger defaults; score = predicted P(T > 730 | x).
##
## Run from the repository root:
##   Rscript opal_fixtures/scripts/make_gbsg2.R
##
## Deterministic: fixed RNG kind, set.seed(SEED) for the split and ranger's
## own seed = SEED for the forest (num.threads = 1 so the result does not
## depend on the machine's CPU count).

suppressPackageStartupMessages({
  library(survival)
  library(ranger)
  library(pROC)
})

SEED       <- 2024L
T_STAR     <- 730L                      # days (two years)
N_TRAIN    <- 412L
N_TEST_EC  <- 24L                       # early-censored patients in the test part
N_TEST_USE <- 250L                      # usable validation rows
SITE_SIZES <- c(51L, 45L, 55L, 46L, 53L)
OUT        <- "opal_fixtures"
PROJECT    <- "GBSG2"

stopifnot(file.exists(OUT))             # must be run from the repository root
RNGkind("Mersenne-Twister", "Inversion", "Rejection")

## ---- data -----------------------------------------------------------------
data(GBSG2, package = "TH.data")
d <- GBSG2
stopifnot(nrow(d) == 686L, !anyNA(d))   # GBSG2 has no missing values
num_cols <- c("age", "tsize", "pnodes", "progrec", "estrec", "time", "cens")
for (v in num_cols) {                   # all stored as whole numbers
  stopifnot(all(d[[v]] == round(d[[v]])))
  d[[v]] <- as.integer(d[[v]])
}

## binary outcome at 730 days:
##   y = 1  recurrence-free at 730 days (time > 730, or time == 730 and censored)
##   y = 0  event (death or recurrence) at or before 730 days
##   y = NA censored before 730 days (outcome unknown; removed from validation)
early <- d$cens == 0L & d$time < T_STAR
d$y <- ifelse(d$cens == 1L & d$time <= T_STAR, 0L,
              ifelse(d$time > T_STAR | (d$time == T_STAR & d$cens == 0L), 1L, NA_integer_))
stopifnot(identical(is.na(d$y), early))

## ---- split ----------------------------------------------------------------
set.seed(SEED)
idx_ec  <- which(early)
idx_use <- which(!early)
n_ec <- min(N_TEST_EC, length(idx_ec))
if (n_ec < N_TEST_EC)
  warning(sprintf("only %d early-censored patients available (wanted %d)", n_ec, N_TEST_EC))
test_ec  <- idx_ec[sample.int(length(idx_ec), n_ec)]
test_use <- idx_use[sample.int(length(idx_use), N_TEST_USE)]
train_idx <- setdiff(seq_len(nrow(d)), c(test_ec, test_use))   # original row order
stopifnot(length(train_idx) == nrow(d) - n_ec - N_TEST_USE)
if (n_ec == N_TEST_EC) stopifnot(length(train_idx) == N_TRAIN)

## random partition of the 250 usable test rows into the five sites
perm <- test_use[sample.int(length(test_use))]
site_of <- rep(seq_along(SITE_SIZES), times = SITE_SIZES)
site_idx <- lapply(seq_along(SITE_SIZES), function(k) sort(perm[site_of == k]))

## ---- model ----------------------------------------------------------------
train <- d[train_idx, ]
rf <- ranger(Surv(time, cens) ~ horTh + age + tsize + tgrade + pnodes + progrec + estrec,
             data = train, num.trees = 20, seed = SEED, num.threads = 1)

## survival probability at 730 days: step function, i.e. the column of the
## largest unique death time <= 730
surv_at <- function(newdata) {
  p <- predict(rf, data = newdata, num.threads = 1)
  j <- max(which(p$unique.death.times <= T_STAR))
  p$survival[, j]
}

## ---- writers --------------------------------------------------------------
COLS <- c("horTh", "age", "menostat", "tsize", "tgrade", "pnodes", "progrec",
          "estrec", "time", "cens", "y", "score")

write_table <- function(df, path) {
  df <- df[, intersect(COLS, names(df))]
  for (v in names(df)) {
    x <- df[[v]]
    if (is.factor(x)) x <- as.character(x)
    else if (v == "score") x <- ifelse(is.na(x), NA, sprintf("%.15g", x))
    df[[v]] <- x
  }
  chr <- unlist(lapply(df, function(x) as.character(x[!is.na(x)])))
  stopifnot(!any(grepl("[,\"\r\n]", chr)))    # safe to write unquoted
  dir.create(dirname(path), recursive = TRUE, showWarnings = FALSE)
  con <- file(path, open = "wb")               # LF line endings everywhere
  on.exit(close(con))
  write.table(df, con, sep = ",", quote = FALSE, row.names = FALSE,
              col.names = TRUE, na = "", eol = "\n", fileEncoding = "UTF-8")
}

json_str <- function(s) {
  s <- gsub("\\", "\\\\", s, fixed = TRUE)
  s <- gsub("\"", "\\\"", s, fixed = TRUE)
  paste0("\"", s, "\"")
}
cats <- function(names, labels = names) list(names = names, labels = labels)
VARS <- list(
  horTh    = list("text",    "",      "hormonal therapy", cats(c("no", "yes"))),
  age      = list("integer", "years", "age of the patient", NULL),
  menostat = list("text",    "",      "menopausal status", cats(c("Pre", "Post"))),
  tsize    = list("integer", "mm",    "tumor size", NULL),
  tgrade   = list("text",    "",      "tumor grade", cats(c("I", "II", "III"))),
  pnodes   = list("integer", "nodes", "number of positive lymph nodes", NULL),
  progrec  = list("integer", "fmol",  "progesterone receptor", NULL),
  estrec   = list("integer", "fmol",  "estrogen receptor", NULL),
  time     = list("integer", "days",  "recurrence-free survival time", NULL),
  cens     = list("integer", "",      "censoring indicator",
                  cats(c("0", "1"), c("censored", "event"))),
  y        = list("integer", "",      "recurrence-free at 730 days (binary outcome for validation)",
                  cats(c("0", "1"), c("event or recurrence within 730 days",
                                      "recurrence-free at 730 days"))),
  score    = list("decimal", "",
                  "predicted probability of recurrence-free survival at 730 days (ranger RSF, 20 trees, fitted on the training split)",
                  NULL)
)
stopifnot(identical(names(VARS), COLS))
## Declared ranges (dsfed's "range" in the dictionary): the values a site says a column can take,
## set from clinical plausibility, not from the records (the data must lie inside them). dsfed
## clips noisy releases to them and bounds a model's linear predictor over them.
RANGES <- list(age = c(18, 100), tsize = c(0, 250), pnodes = c(0, 100), progrec = c(0, 5000),
               estrec = c(0, 5000), time = c(0, 3650), score = c(0, 1))

write_dictionary <- function(table, cols, path) {
  var_json <- vapply(cols, function(v) {
    x <- VARS[[v]]
    cj <- if (is.null(x[[4]])) "[]" else
      paste0("[", paste0("{\"name\": ", json_str(x[[4]]$names),
                         ", \"label\": ", json_str(x[[4]]$labels), "}",
                         collapse = ", "), "]")
    rj <- if (is.null(RANGES[[v]])) "" else
      sprintf(", \"range\": [%s, %s]", format(RANGES[[v]][1]), format(RANGES[[v]][2]))
    sprintf("    {\"name\": %s, \"valueType\": %s, \"unit\": %s, \"label\": %s, \"categories\": %s%s}",
            json_str(v), json_str(x[[1]]), json_str(x[[2]]), json_str(x[[3]]), cj, rj)
  }, character(1))
  txt <- paste0("{\"project\": ", json_str(PROJECT), ", \"table\": ", json_str(table),
                ", \"entityType\": \"Participant\",\n  \"variables\": [\n",
                paste(var_json, collapse = ",\n"), "\n  ]}\n")
  dir.create(dirname(path), recursive = TRUE, showWarnings = FALSE)
  con <- file(path, open = "wb")
  on.exit(close(con))
  writeBin(charToRaw(enc2utf8(txt)), con)
}

## ---- training split -------------------------------------------------------
tr_dir <- file.path(OUT, "training", PROJECT)
train_cols <- setdiff(COLS, "score")
write_table(train, file.path(tr_dir, "train.csv"))
write_dictionary("train", train_cols, file.path(tr_dir, "train.dictionary.json"))

## ---- validation sites -----------------------------------------------------
all_y <- integer(0); all_score <- numeric(0); summ <- NULL
for (k in seq_along(SITE_SIZES)) {
  v <- d[site_idx[[k]], ]
  v$score <- surv_at(v)
  stopifnot(!anyNA(v$y), !anyNA(v$score))
  dir_k <- file.path(OUT, paste0("site", k), PROJECT)
  write_table(v, file.path(dir_k, "validation.csv"))
  write_dictionary("validation", COLS, file.path(dir_k, "validation.dictionary.json"))
  all_y <- c(all_y, v$y); all_score <- c(all_score, v$score)
  summ <- rbind(summ, data.frame(site = paste0("site", k), n = nrow(v),
                                 y0 = sum(v$y == 0L), y1 = sum(v$y == 1L)))
}

## ---- summary --------------------------------------------------------------
roc_obj <- roc(response = all_y, predictor = all_score, levels = c(0, 1),
               direction = "<", quiet = TRUE)
auc_val <- as.numeric(auc(roc_obj))

cat("GBSG2 fixtures (seed ", SEED, ", R ", as.character(getRversion()), ", ranger ",
    as.character(packageVersion("ranger")), ", TH.data ",
    as.character(packageVersion("TH.data")), ")\n", sep = "")
cat(sprintf("rows: %d total, %d early-censored (cens == 0 & time < %d)\n",
            nrow(d), sum(early), T_STAR))
cat(sprintf("training: %d rows (%d early-censored, y0 = %d, y1 = %d; event rate among usable %.3f)\n",
            nrow(train), sum(is.na(train$y)), sum(train$y == 0L, na.rm = TRUE),
            sum(train$y == 1L, na.rm = TRUE), mean(train$y == 0L, na.rm = TRUE)))
cat(sprintf("test part: %d rows = %d early-censored (dropped) + %d validation rows\n",
            n_ec + N_TEST_USE, n_ec, N_TEST_USE))
print(summ, row.names = FALSE)
cat(sprintf("pooled validation: n = %d, y0 = %d, y1 = %d (event rate %.3f)\n",
            length(all_y), sum(all_y == 0L), sum(all_y == 1L), mean(all_y == 0L)))
cat(sprintf("score range: [%.4f, %.4f]\n", min(all_score), max(all_score)))
cat(sprintf("pooled empirical AUC (pROC): %.6f\n", auc_val))
