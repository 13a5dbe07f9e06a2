//go:build linux

package procfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// openFlags open a file a process controls: read only, without blocking on
// a FIFO, never through a symbolic link as last component.
const openFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openat2 is unix.Openat2; tests replace it to take the fallback for
// kernels before 5.6.
var openat2 = unix.Openat2

// noOpenat2 is set once openat2 returned ENOSYS.
var noOpenat2 atomic.Bool

// OpenInRoot opens path as process pid sees it, resolved inside the
// process's root: ".." and absolute symbolic links stay inside it (they are
// not followed out of it into the collector's root, as opening
// <Root>/<pid>/root/<path> would), magic links (/proc/*/fd/*) and a
// symbolic link as last component are refused, a FIFO is not waited on.
// Only a regular file is returned; anything else is a *RefusedError.
//
// The open itself can still block on FUSE or a dead network file system:
// callers on a path that must not block run it under a Deadline.
func (fs FS) OpenInRoot(pid uint32, path string) (*os.File, error) {
	name := fs.RootPath(pid, path)
	root, err := unix.Open(fs.Path(pid, "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: fs.Path(pid, "root"), Err: err}
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, inRootPath(path))
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, &RefusedError{Path: name, Reason: ReasonSymlink, Detail: err.Error()}
		}
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	if err := checkRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// fstat returns the status of f's descriptor (f.Fd would make it blocking).
func fstat(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := control(f, func(fd int) error { return unix.Fstat(fd, &st) })
	if err != nil {
		return st, fmt.Errorf("fstat %s: %w", f.Name(), err)
	}
	return st, nil
}

// control runs fn on f's descriptor.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// openBeneath opens rel below the directory root. With openat2 (Linux 5.6)
// symbolic links are resolved as if root were "/"; before it, a walk that
// refuses every symbolic link on the way.
func openBeneath(root int, rel string) (int, error) {
	if rel == "" {
		return -1, unix.EISDIR
	}
	if !noOpenat2.Load() {
		how := unix.OpenHow{Flags: openFlags, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
		var err error
		for range 8 {
			var fd int
			fd, err = openat2(root, rel, &how)
			if err == unix.ENOSYS {
				noOpenat2.Store(true)
				break
			}
			if err != unix.EAGAIN { // EAGAIN: a rename or mount raced with the lookup
				return fd, err
			}
		}
		if err == unix.EAGAIN {
			return -1, err
		}
	}
	return walkNoFollow(root, rel)
}

// walkNoFollow opens rel below root one component at a time, refusing any
// symbolic link (ELOOP for the last component, ENOTDIR on the way). Paths
// in maps are already resolved, so only a process that planted a link is
// refused; perf maps under a linked /tmp are too, on such old kernels.
func walkNoFollow(root int, rel string) (int, error) {
	parts := strings.Split(rel, "/")
	dir := root
	defer func() {
		if dir != root {
			unix.Close(dir)
		}
	}()
	for _, p := range parts[:len(parts)-1] {
		next, err := unix.Openat(dir, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		if dir != root {
			unix.Close(dir)
		}
		dir = next
	}
	return unix.Openat(dir, parts[len(parts)-1], openFlags, 0)
}

// checkRegular refuses f unless it is a regular file.
func checkRegular(f *os.File) error {
	st, err := fstat(f)
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &RefusedError{Path: f.Name(), Reason: ReasonNotRegular, Detail: fmt.Sprintf("file type %#o", st.Mode&unix.S_IFMT)}
	}
	return nil
}

// ErrMappingGone says that the process no longer has the mapping whose
// file was to be opened (it unmapped it, exec'd or exited): the failure
// says nothing of the file, which another process's mapping may open.
var ErrMappingGone = errors.New("the mapping is gone from the process")

// OpenMappedFile opens the file of mapping m of process pid: its path
// inside the process's root (OpenInRoot), kept only when its device and
// inode are those of the mapping, so the process cannot offer another file
// under the name; otherwise, and for deleted files, the kernel's own link
// to the mapped file, /proc/<pid>/map_files/<start>-<end> (needs
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE). Files on FUSE or network file
// systems are refused (ReasonRemoteFS): the callers map them, and a page
// fault on such a file can block for as long as its server wants.
func (fs FS) OpenMappedFile(pid uint32, m Map) (*os.File, error) {
	var first error
	if !m.Deleted() {
		f, err := fs.OpenInRoot(pid, m.Path)
		if err == nil {
			if err = sameFile(f, m); err == nil {
				return CheckLocal(f)
			}
			f.Close()
		}
		first = err
	}
	name := fs.Path(pid, "map_files", fmt.Sprintf("%x-%x", m.Start, m.End))
	// The link is the kernel's (a magic link, followed): it leads to the
	// mapped file itself.
	f, err := os.OpenFile(name, openFlags&^unix.O_NOFOLLOW, 0)
	if err == nil {
		if err = checkRegular(f); err == nil {
			return CheckLocal(f)
		}
		f.Close()
	}
	// Gone: neither the path nor the kernel's link is there (a path
	// there but refused is the process's doing, and stays a refusal).
	if notThere(err) && (first == nil || notThere(first)) {
		err = fmt.Errorf("%w: %w", ErrMappingGone, err)
	}
	if first != nil {
		return nil, errors.Join(first, err)
	}
	return nil, err
}

// notThere says err is a missing file or process.
func notThere(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// sameFile refuses f unless its device and inode are those of m.
func sameFile(f *os.File, m Map) error {
	st, err := fstat(f)
	if err != nil {
		return err
	}
	if unix.Major(st.Dev) != m.DevMajor || unix.Minor(st.Dev) != m.DevMinor || st.Ino != m.Inode {
		return &RefusedError{Path: f.Name(), Reason: ReasonReplaced,
			Detail: fmt.Sprintf("file is %x:%x inode %d, the mapping %x:%x inode %d",
				unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, m.DevMajor, m.DevMinor, m.Inode)}
	}
	return nil
}

// remoteFS are the file systems whose reads may block indefinitely: FUSE
// (the process may run the server) and network file systems.
var remoteFS = map[int64]string{
	unix.FUSE_SUPER_MAGIC:  "fuse",
	unix.NFS_SUPER_MAGIC:   "nfs",
	unix.SMB_SUPER_MAGIC:   "smb",
	unix.SMB2_SUPER_MAGIC:  "smb2",
	unix.CIFS_SUPER_MAGIC:  "cifs",
	unix.CODA_SUPER_MAGIC:  "coda",
	unix.AFS_SUPER_MAGIC:   "afs",
	unix.AFS_FS_MAGIC:      "afs",
	unix.V9FS_MAGIC:        "9p",
	unix.CEPH_SUPER_MAGIC:  "ceph",
	unix.NCP_SUPER_MAGIC:   "ncp",
	unix.OCFS2_SUPER_MAGIC: "ocfs2",
}

// CheckLocal returns f, or closes it and refuses it (ReasonRemoteFS) when
// it is on FUSE or a network file system: check a file a process controls
// before mapping it.
func CheckLocal(f *os.File) (*os.File, error) {
	var st unix.Statfs_t
	if err := control(f, func(fd int) error { return unix.Fstatfs(fd, &st) }); err != nil {
		f.Close()
		return nil, fmt.Errorf("fstatfs %s: %w", f.Name(), err)
	}
	if fsName, ok := remoteFS[int64(st.Type)]; ok {
		f.Close()
		return nil, &RefusedError{Path: f.Name(), Reason: ReasonRemoteFS, Detail: "on " + fsName}
	}
	return f, nil
}

// CheckOwner refuses f unless it is owned by root or by the real or
// effective uid of the process whose status is st: a process offers only
// its own files, not (through a link or a bind mount) another user's.
func CheckOwner(f *os.File, st Status) error {
	s, err := fstat(f)
	if err != nil {
		return err
	}
	if s.Uid == 0 || s.Uid == st.Uid || s.Uid == st.EUid {
		return nil
	}
	return &RefusedError{Path: f.Name(), Reason: ReasonOwner,
		Detail: fmt.Sprintf("owned by uid %d, the process runs as uid %d", s.Uid, st.Uid)}
}

// FDPath returns the path of the collector's descriptor of f below Root
// (<Root>/self/fd/<n>): a magic link to exactly that file, for APIs that take
// a path (uprobes) when the path a process shows must not be trusted.
func (fs FS) FDPath(f *os.File) string {
	return fmt.Sprintf("%s/self/fd/%d", fs.root(), f.Fd())
}
