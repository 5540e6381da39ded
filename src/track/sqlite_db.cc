#include "track/sqlite_db.h"

#include <sqlite3.h>

#include "core/error.h"

namespace strata::sql {

Db::Db(const std::string& path, int busy_timeout_ms) : path_(path) {
  const int rc =
      sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    fail("cannot open registry database '", path, "': ", msg,
         " (check that the directory exists and is writable)");
  }
  sqlite3_busy_timeout(db_, busy_timeout_ms);
  sqlite3_extended_result_codes(db_, 1);
}

Db::~Db() {
  if (db_) sqlite3_close_v2(db_);
}

void Db::fail_sql(const std::string& what, int rc) const {
  const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  fail("registry database '", path_, "': ", what, ": ", msg, " (SQLite code ", rc, ")");
}

void Db::exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    fail("registry database '", path_, "': ", msg, " (SQLite code ", rc,
         ", running: ", sql.substr(0, 60), ")");
  }
}

Stmt::Stmt(Db& db, const std::string& sql) : db_(db) {
  const int rc = sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &stmt_, nullptr);
  if (rc != SQLITE_OK) db.fail_sql("preparing '" + sql.substr(0, 60) + "'", rc);
}

Stmt::~Stmt() {
  sqlite3_finalize(stmt_);
}

Stmt& Stmt::bind(int i, int64_t v) {
  const int rc = sqlite3_bind_int64(stmt_, i, v);
  if (rc != SQLITE_OK) db_.fail_sql("bind", rc);
  return *this;
}

Stmt& Stmt::bind(int i, double v) {
  const int rc = sqlite3_bind_double(stmt_, i, v);
  if (rc != SQLITE_OK) db_.fail_sql("bind", rc);
  return *this;
}

Stmt& Stmt::bind(int i, const std::string& v) {
  const int rc =
      sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) db_.fail_sql("bind", rc);
  return *this;
}

Stmt& Stmt::bind(int i, const std::optional<double>& v) {
  if (v) return bind(i, *v);
  const int rc = sqlite3_bind_null(stmt_, i);
  if (rc != SQLITE_OK) db_.fail_sql("bind", rc);
  return *this;
}

Stmt& Stmt::bind(int i, const std::optional<int64_t>& v) {
  if (v) return bind(i, *v);
  const int rc = sqlite3_bind_null(stmt_, i);
  if (rc != SQLITE_OK) db_.fail_sql("bind", rc);
  return *this;
}

bool Stmt::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_.fail_sql("step", rc);
}

void Stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t Stmt::integer(int col) const {
  return sqlite3_column_int64(stmt_, col);
}
double Stmt::real(int col) const {
  return sqlite3_column_double(stmt_, col);
}
bool Stmt::is_null(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

std::string Stmt::text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (!p) return "";
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

Transaction::Transaction(Db& db) : db_(db) {
  db_.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (open_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  db_.exec("COMMIT");
  open_ = false;
}

}  // namespace strata::sql
