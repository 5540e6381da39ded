// A thin RAII layer over SQLite's C API for the model registry: one connection, prepared
// statements with typed binds and reads, and write transactions taken up front (BEGIN
// IMMEDIATE), so that two processes writing at once queue on the database lock instead of
// failing halfway. Every error is a strata::Error naming the database file and SQLite's message.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace strata::sql {

class Db;

class Stmt {
 public:
  Stmt(Db& db, const std::string& sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  // Binds are 1-based, as in SQLite. A nullopt binds NULL.
  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, double v);
  Stmt& bind(int i, const std::string& v);
  Stmt& bind(int i, const char* v) { return bind(i, std::string(v)); }
  Stmt& bind(int i, const std::optional<double>& v);
  Stmt& bind(int i, const std::optional<int64_t>& v);

  // Advances to the next row; false when done. Statements without rows: call once.
  bool step();
  void reset();  // ready to run again with new binds

  int64_t integer(int col) const;
  double real(int col) const;
  std::string text(int col) const;  // "" for NULL
  bool is_null(int col) const;

 private:
  Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
};

class Db {
 public:
  // Opens (creating when missing) the database file; waits up to busy_timeout_ms for locks
  // other processes hold.
  explicit Db(const std::string& path, int busy_timeout_ms = 60000);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  void exec(const std::string& sql);  // one or more statements, no results
  const std::string& path() const { return path_; }
  sqlite3* handle() { return db_; }
  [[noreturn]] void fail_sql(const std::string& what, int rc) const;

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

// BEGIN IMMEDIATE on construction (the write lock now, not at the first write); commit()
// makes it durable; destroyed without commit() it rolls back.
class Transaction {
 public:
  explicit Transaction(Db& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Db& db_;
  bool open_ = true;
};

}  // namespace strata::sql
