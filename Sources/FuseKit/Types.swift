import Glibc

/// An inode number as the kernel knows it.
public struct InodeNumber: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    /// The mount's root directory.
    public static let root = InodeNumber(1)
    public var description: String { "#\(rawValue)" }
}

/// A file or directory handle handed to the kernel at open and given back with each request.
public struct FileHandle: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
}

/// An errno value, thrown by a file system to make a request fail.
public struct Errno: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public init(_ rawValue: Int32) { self.rawValue = rawValue }
    public var description: String { "\(rawValue) (\(String(cString: strerror(rawValue))))" }

    public static let noEntry = Errno(ENOENT)
    public static let exists = Errno(EEXIST)
    public static let invalid = Errno(EINVAL)
    public static let notPermitted = Errno(EPERM)
    public static let accessDenied = Errno(EACCES)
    public static let notSupported = Errno(EOPNOTSUPP)
    public static let noData = Errno(ENODATA)
    public static let range = Errno(ERANGE)
    public static let badHandle = Errno(EBADF)
    public static let io = Errno(EIO)
    public static let isDirectory = Errno(EISDIR)
    public static let notDirectory = Errno(ENOTDIR)
    public static let fileTooLarge = Errno(EFBIG)
    public static let quotaExceeded = Errno(EDQUOT)
    public static let noSpace = Errno(ENOSPC)
    public static let nameTooLong = Errno(ENAMETOOLONG)
    public static let busy = Errno(EBUSY)
    public static let notImplemented = Errno(ENOSYS)
}

/// Who made a request. `threadID` is the calling thread's id (the kernel's pid field),
/// not the process id; it is 0 for RELEASE and FORGET.
public struct RequestContext: Sendable, Equatable {
    public var threadID: Int32
    public var uid: UInt32
    public var gid: UInt32
    public init(threadID: Int32, uid: UInt32, gid: UInt32) {
        self.threadID = threadID
        self.uid = uid
        self.gid = gid
    }
}

public enum FileKind: Sendable {
    case regularFile
    case directory
}

/// A second-and-nanosecond time stamp.
public struct TimeStamp: Sendable, Equatable {
    public var seconds: Int
    public var nanoseconds: Int
    public init(seconds: Int, nanoseconds: Int) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }
    public init(secondsSince1970 value: Double) {
        let whole = value.rounded(.down)
        self.init(seconds: Int(whole), nanoseconds: Int(((value - whole) * 1e9).rounded(.down)))
    }
}

/// What GETATTR answers.
public struct FileAttributes: Sendable, Equatable {
    public var inode: InodeNumber
    public var kind: FileKind
    public var permissions: UInt32
    public var size: UInt64
    public var linkCount: UInt32
    public var uid: UInt32
    public var gid: UInt32
    public var accessTime: TimeStamp
    public var modificationTime: TimeStamp
    public var changeTime: TimeStamp

    public init(inode: InodeNumber, kind: FileKind, permissions: UInt32, size: UInt64, linkCount: UInt32,
                uid: UInt32, gid: UInt32, accessTime: TimeStamp, modificationTime: TimeStamp, changeTime: TimeStamp) {
        self.inode = inode
        self.kind = kind
        self.permissions = permissions
        self.size = size
        self.linkCount = linkCount
        self.uid = uid
        self.gid = gid
        self.accessTime = accessTime
        self.modificationTime = modificationTime
        self.changeTime = changeTime
    }
}

/// A GETATTR or SETATTR answer: attributes and how long the kernel may cache them.
public struct AttributesReply: Sendable, Equatable {
    public var attributes: FileAttributes
    public var timeout: Double
    public init(attributes: FileAttributes, timeout: Double) {
        self.attributes = attributes
        self.timeout = timeout
    }
}

/// A LOOKUP or CREATE answer: a name's inode, with how long the kernel may cache it.
public struct Entry: Sendable, Equatable {
    public var attributes: FileAttributes
    public var attributeTimeout: Double
    public var entryTimeout: Double
    public init(attributes: FileAttributes, attributeTimeout: Double, entryTimeout: Double) {
        self.attributes = attributes
        self.attributeTimeout = attributeTimeout
        self.entryTimeout = entryTimeout
    }
}

/// The answer to a LOOKUP: an entry, or "no such name" that the kernel may cache for `timeout`.
public enum LookupResult: Sendable, Equatable {
    case found(Entry)
    case notFound(timeout: Double)
}

/// An OPEN or CREATE answer.
public struct OpenReply: Sendable, Equatable {
    public var handle: FileHandle
    /// Keep the kernel's page cache of the file from earlier opens.
    public var keepCache: Bool
    /// Bypass the page cache: every read and write of this handle reaches the file system.
    public var directIO: Bool
    /// The kernel sends no FLUSH when this handle is closed (for handles that never write).
    public var noFlush: Bool
    public init(handle: FileHandle, keepCache: Bool, directIO: Bool = false, noFlush: Bool = false) {
        self.handle = handle
        self.keepCache = keepCache
        self.directIO = directIO
        self.noFlush = noFlush
    }
}

/// The flags of open(2).
public struct OpenFlags: Sendable, Equatable {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public var isWritable: Bool { rawValue & O_ACCMODE != O_RDONLY }
    public var truncates: Bool { rawValue & O_TRUNC != 0 }
    public var exclusive: Bool { rawValue & O_EXCL != 0 }
    public var appends: Bool { rawValue & O_APPEND != 0 }
}

/// What a SETATTR asks to change; nil fields stay as they are.
public struct AttributeChanges: Sendable, Equatable {
    public enum TimeChange: Sendable, Equatable {
        case now
        case to(TimeStamp)
    }
    public var permissions: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public var size: UInt64?
    public var accessTime: TimeChange?
    public var modificationTime: TimeChange?
    public init(permissions: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, size: UInt64? = nil,
                accessTime: TimeChange? = nil, modificationTime: TimeChange? = nil) {
        self.permissions = permissions
        self.uid = uid
        self.gid = gid
        self.size = size
        self.accessTime = accessTime
        self.modificationTime = modificationTime
    }
}

/// The flags of renameat2(2).
public struct RenameFlags: OptionSet, Sendable {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let noReplace = RenameFlags(rawValue: 1)
    public static let exchange = RenameFlags(rawValue: 2)
}

/// One name of a directory listing. `nextOffset` is the offset the kernel sends to continue after it.
public struct DirectoryEntry: Sendable, Equatable {
    public var name: String
    public var inode: InodeNumber
    public var kind: FileKind
    public var nextOffset: Int
    public init(name: String, inode: InodeNumber, kind: FileKind, nextOffset: Int) {
        self.name = name
        self.inode = inode
        self.kind = kind
        self.nextOffset = nextOffset
    }
}

/// What STATFS answers (`df`): blocks of `blockSize` bytes and file slots.
public struct FileSystemStatistics: Sendable, Equatable {
    public var blockSize: UInt64
    public var blocks: UInt64
    public var blocksFree: UInt64
    public var files: UInt64
    public var filesFree: UInt64
    public var nameMax: UInt64
    public init(blockSize: UInt64, blocks: UInt64, blocksFree: UInt64, files: UInt64, filesFree: UInt64, nameMax: UInt64) {
        self.blockSize = blockSize
        self.blocks = blocks
        self.blocksFree = blocksFree
        self.files = files
        self.filesFree = filesFree
        self.nameMax = nameMax
    }
}
