import FuseKit
import Glibc
import KVStore

/// Why the mount refused an operation that the store never saw.
public enum FileSystemError: Error, Equatable, Sendable {
    case noSuchFile
    case fileExists
    case notADirectory
    /// The mount is one flat directory.
    case directoriesNotSupported
    case linksNotSupported
    case specialFilesNotSupported
    /// Keys have fixed permissions (0644) and owner (the mounting user).
    case permissionsFixed
    case ownershipFixed
    case noSuchAttribute
    case attributeReadOnly
    case attributesNotSupported
    case badHandle
    case notOpenForWriting
    /// An empty file is not a property list, so it cannot become a key's value.
    case emptyValue
    /// The name is not the canonical name of any key (see `KeyFileName`).
    case nonCanonicalName(String)
    case tooManyEditorFiles(limit: Int)
    case editorFileTooLarge(limit: Int)
    case exchangeNotSupported
    /// `synchronize()` (fsync of the root) could not reach the remote.
    case remoteUnreachable(String)
    /// The remote is busy or rate-limited: try again later.
    case remoteBusy(String)
    /// The sync server refused the mount's token (unknown, revoked, or not for this store),
    /// with its reason.
    case authorizationRefused(String)
}

/// The one place that turns an error into the errno a request is answered with.
public enum ErrnoMapping {
    public static func errno(for error: any Error, log: (String) -> Void) -> Int32 {
        switch error {
        case let error as StoreError:
            switch error {
            case .invalidPropertyList, .emptyKey, .invalidKey, .invalidStamp, .invalidStoreName: return EINVAL
            case .readOnly: return EROFS
            case .valueTooLarge: return EFBIG
            case .storeFull: return EDQUOT
            case .tooManyKeys: return ENOSPC
            case .keyTooLong: return ENAMETOOLONG
            case .noSuchKey: return ENOENT
            case .keyExists: return EEXIST
            case .storeInUse: return EBUSY
            case .database(let message):
                log("store failure answered with EIO: \(message)")
                return EIO
            }
        case let error as FileSystemError:
            switch error {
            case .noSuchFile: return ENOENT
            case .fileExists: return EEXIST
            case .notADirectory: return ENOTDIR
            case .directoriesNotSupported, .linksNotSupported, .specialFilesNotSupported,
                 .permissionsFixed, .ownershipFixed, .attributeReadOnly: return EPERM
            case .noSuchAttribute: return ENODATA
            case .attributesNotSupported: return EOPNOTSUPP
            case .badHandle, .notOpenForWriting: return EBADF
            case .emptyValue, .nonCanonicalName, .exchangeNotSupported: return EINVAL
            case .tooManyEditorFiles: return ENOSPC
            case .editorFileTooLarge: return EFBIG
            case .remoteUnreachable: return EHOSTUNREACH
            case .remoteBusy: return EAGAIN
            case .authorizationRefused: return EACCES
            }
        case let error as Errno:
            return error.rawValue
        default:
            log("unexpected error answered with EIO: \(error)")
            return EIO
        }
    }
}
