// Command plan prints, for each query of a file, its plan and its best time of three runs, on a
// SQLite store (EXPLAIN QUERY PLAN, through the modernc driver the store uses) or a Postgres one
// (EXPLAIN (ANALYZE, BUFFERS), in a transaction rolled back). The file holds blocks of
// "=== name" lines, each followed by one query. ONLY=text runs the blocks whose name contains it.
//
//	go run ./scripts/largestore/plan sqlite /tmp/big.db queries.txt
//	go run ./scripts/largestore/plan postgres postgres://… queries.txt
package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: plan sqlite|postgres DSN FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3], os.Getenv("ONLY")); err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		os.Exit(1)
	}
}

type query struct{ name, sql string }

func read(file string) ([]query, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var qs []query
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "=== "):
			qs = append(qs, query{name: l[4:]})
		case len(qs) > 0:
			qs[len(qs)-1].sql += l + "\n"
		}
	}
	return qs, sc.Err()
}

func run(kind, dsn, file, only string) error {
	qs, err := read(file)
	if err != nil {
		return err
	}
	for i := len(qs) - 1; i >= 0; i-- {
		if only != "" && !strings.Contains(qs[i].name, only) {
			qs = append(qs[:i], qs[i+1:]...)
		}
	}
	switch kind {
	case "sqlite":
		return planSQLite(dsn, qs)
	case "postgres":
		return planPostgres(dsn, qs)
	}
	return fmt.Errorf("unknown store kind %q", kind)
}

func planSQLite(path string, qs []query) error {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range qs {
		fmt.Println("===", q.name)
		rows, err := db.Query("EXPLAIN QUERY PLAN " + q.sql)
		if err != nil {
			fmt.Println("   error:", err)
			continue
		}
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				rows.Close()
				return err
			}
			fmt.Printf("   %d/%d %s\n", id, parent, detail)
		}
		rows.Close()
		best, n := time.Hour, 0
		for range 3 {
			start := time.Now()
			rows, err := db.Query(q.sql)
			if err != nil {
				fmt.Println("   error:", err)
				break
			}
			for n = 0; rows.Next(); n++ {
			}
			err = rows.Err()
			rows.Close()
			if err != nil {
				fmt.Println("   error:", err)
				break
			}
			best = min(best, time.Since(start))
		}
		fmt.Printf("   -> %d rows, best of 3: %.1f ms\n", n, float64(best.Microseconds())/1000)
	}
	return nil
}

func planPostgres(dsn string, qs []query) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range qs {
		fmt.Println("===", q.name)
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q.sql)
		if err == nil {
			for rows.Next() {
				var line string
				if err = rows.Scan(&line); err != nil {
					break
				}
				fmt.Println("   " + line)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			fmt.Println("   error:", err)
		}
		if err := tx.Rollback(ctx); err != nil { // EXPLAIN ANALYZE of a DELETE deletes: undo it
			return err
		}
	}
	return nil
}
