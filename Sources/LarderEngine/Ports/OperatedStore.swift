/// Everything the service needs of a store: the cache, the admin API, warm jobs, health.
public protocol OperatedStore: CacheStore, CacheAdministration, WarmJobStore, StorageHealth {
    var figures: StoreFigures { get }
    func close()
}
