package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// writeInitramfs packs the tree under root into a gzipped cpio archive in
// the "newc" format the kernel unpacks into its initial root file system.
func writeInitramfs(root, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		return err
	}
	w := &cpioWriter{w: zw}
	var paths []string
	err = filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths) // parents before children
	for _, p := range paths {
		rel, _ := filepath.Rel(root, p)
		if err := w.add(p, rel); err != nil {
			return fmt.Errorf("pack %s: %w", rel, err)
		}
	}
	if err := w.trailer(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

type cpioWriter struct {
	w   io.Writer
	ino uint32
	n   int64 // bytes written, for padding
}

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// header writes one newc header and the entry's name.
func (c *cpioWriter) header(name string, mode uint32, size int64) error {
	c.ino++
	nlink := uint32(1)
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(h + name + "\x00")); err != nil {
		return err
	}
	return c.pad()
}

func (c *cpioWriter) add(path, name string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	perm := uint32(st.Mode().Perm())
	switch {
	case st.IsDir():
		return c.header(name, 0o040000|perm, 0)
	case st.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		if err := c.header(name, 0o120000|0o777, int64(len(target))); err != nil {
			return err
		}
		if err := c.write([]byte(target)); err != nil {
			return err
		}
		return c.pad()
	case st.Mode().IsRegular():
		if err := c.header(name, 0o100000|perm, st.Size()); err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(c.w, f)
		c.n += n
		if err != nil {
			return err
		}
		if n != st.Size() {
			return fmt.Errorf("size changed while packing (%d of %d bytes)", n, st.Size())
		}
		return c.pad()
	default:
		return fmt.Errorf("unsupported file type %v", st.Mode().Type())
	}
}

func (c *cpioWriter) trailer() error {
	if err := c.header("TRAILER!!!", 0, 0); err != nil {
		return err
	}
	// The kernel reads the archive in 512-byte blocks.
	if r := c.n % 512; r != 0 {
		return c.write(make([]byte, 512-r))
	}
	return nil
}
